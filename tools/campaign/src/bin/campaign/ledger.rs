//! What the driver saw: claims (webhooks and re-deliveries), settle calls, fault counters and the
//! freeze switches shared by the proxies.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::time::Instant;

/// A dispatch attempt the kernel claimed: seen as its webhook, or returned by `redeliver`.
#[derive(Debug, Clone)]
pub(crate) struct Claim {
    pub(crate) execution_id: String,
    pub(crate) attempt: u32,
    /// When the driver saw it (the kernel claimed it earlier).
    pub(crate) seen_at: Instant,
}

/// A settle call that reached the kernel.
#[derive(Debug, Clone)]
pub(crate) struct SettleCall {
    pub(crate) slot: usize,
    pub(crate) kind: &'static str,
    pub(crate) path: String,
    pub(crate) dispatch_id: String,
    pub(crate) attempt: u32,
    /// When its first byte was written to the kernel.
    pub(crate) sent_at: Instant,
    pub(crate) status: u16,
    pub(crate) decision: String,
}

/// Fault and traffic counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) kills: AtomicU64,
    pub(crate) kills_mid_step: AtomicU64,
    pub(crate) freezes_short: AtomicU64,
    pub(crate) freezes_long: AtomicU64,
    pub(crate) cut_requests: AtomicU64,
    pub(crate) cut_responses: AtomicU64,
    pub(crate) deliveries: AtomicU64,
    pub(crate) duplicated: AtomicU64,
    pub(crate) delayed: AtomicU64,
    pub(crate) stale_replays: AtomicU64,
    pub(crate) redeliveries: AtomicU64,
    pub(crate) deadlines: AtomicU64,
    pub(crate) approvals: AtomicU64,
    /// Kernel `SIGKILL`s (each followed by a restart on the same data directory).
    pub(crate) kernel_kills: AtomicU64,
    /// Of those, kills while an execution was running.
    pub(crate) kernel_kills_live: AtomicU64,
    /// Total and longest time from a kernel kill to its successor's ready line, in ms.
    pub(crate) kernel_down_ms: AtomicU64,
    pub(crate) kernel_down_max_ms: AtomicU64,
}

/// Shared by the driver, the proxies and the injector.
#[derive(Debug)]
pub(crate) struct Ledger {
    pub(crate) counters: Counters,
    /// Probability of a cut request and, separately, of a cut response, per exchange.
    pub(crate) cut_probability: f64,
    faults: AtomicBool,
    /// Freeze end per slot.
    frozen: Mutex<Vec<Option<Instant>>>,
    /// Claims by dispatch id.
    claims: Mutex<HashMap<String, Vec<Claim>>>,
    settles: Mutex<Vec<SettleCall>>,
    /// Cut exchanges: (method, path, `request`|`response`).
    cuts: Mutex<Vec<(String, String, &'static str)>>,
    /// Per execution: what the proxies did, with the time since the start.
    traces: Mutex<HashMap<String, Vec<String>>>,
    start: Instant,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Ledger {
    pub(crate) fn new(slots: usize, cut_probability: f64) -> Self {
        Self {
            counters: Counters::default(),
            cut_probability,
            faults: AtomicBool::new(true),
            frozen: Mutex::new(vec![None; slots]),
            claims: Mutex::new(HashMap::new()),
            settles: Mutex::new(Vec::new()),
            cuts: Mutex::new(Vec::new()),
            traces: Mutex::new(HashMap::new()),
            start: Instant::now(),
        }
    }

    /// Whether faults are injected (off for the final drain).
    pub(crate) fn faults_on(&self) -> bool {
        self.faults.load(Ordering::Relaxed)
    }

    /// Stops injecting faults; thaws every slot.
    pub(crate) fn stop_faults(&self) {
        self.faults.store(false, Ordering::Relaxed);
        lock(&self.frozen).iter_mut().for_each(|f| *f = None);
    }

    /// Freezes `slot` until `until`.
    pub(crate) fn freeze(&self, slot: usize, until: Instant) {
        if let Some(f) = lock(&self.frozen).get_mut(slot) {
            *f = Some(until);
        }
    }

    /// Waits while `slot` is frozen.
    pub(crate) async fn wait_thawed(&self, slot: usize) {
        loop {
            let until = lock(&self.frozen).get(slot).copied().flatten();
            match until {
                Some(until) if until > Instant::now() => tokio::time::sleep_until(until).await,
                _ => return,
            }
        }
    }

    /// Adds one kernel outage (kill to ready) to the counters.
    pub(crate) fn note_kernel_downtime(&self, down: std::time::Duration) {
        let ms = u64::try_from(down.as_millis()).unwrap_or(u64::MAX);
        self.counters
            .kernel_down_ms
            .fetch_add(ms, Ordering::Relaxed);
        self.counters
            .kernel_down_max_ms
            .fetch_max(ms, Ordering::Relaxed);
    }

    pub(crate) fn record_claim(&self, dispatch_id: &str, claim: Claim) {
        lock(&self.claims)
            .entry(dispatch_id.to_owned())
            .or_default()
            .push(claim);
    }

    pub(crate) fn record_settle(&self, call: SettleCall) {
        lock(&self.settles).push(call);
    }

    /// The first claim of `dispatch_id` newer than `attempt`, seen before `at`.
    pub(crate) fn superseding_claim(
        &self,
        dispatch_id: &str,
        attempt: u32,
        at: Instant,
    ) -> Option<Claim> {
        lock(&self.claims).get(dispatch_id).and_then(|claims| {
            claims
                .iter()
                .filter(|c| c.attempt > attempt && c.seen_at < at)
                .min_by_key(|c| c.seen_at)
                .cloned()
        })
    }

    pub(crate) fn record_cut(&self, method: &str, path: &str, what: &'static str) {
        lock(&self.cuts).push((method.to_owned(), path.to_owned(), what));
    }

    /// Notes `what` happened to `execution_id` now.
    pub(crate) fn trace(&self, execution_id: &str, what: String) {
        let at = self.start.elapsed().as_secs_f64();
        lock(&self.traces)
            .entry(execution_id.to_owned())
            .or_default()
            .push(format!("{at:>9.3}s {what}"));
    }

    /// The trace of `execution_id`.
    pub(crate) fn trace_of(&self, execution_id: &str) -> Vec<String> {
        lock(&self.traces)
            .get(execution_id)
            .cloned()
            .unwrap_or_default()
    }

    /// Whether an exchange `method path` (exactly) was cut.
    pub(crate) fn cut_exists(&self, method: &str, path: &str) -> bool {
        lock(&self.cuts)
            .iter()
            .any(|(m, p, _)| m == method && p.split('?').next() == Some(path))
    }

    /// The cuts of calls about `execution_id`.
    pub(crate) fn cuts_of(&self, execution_id: &str) -> Vec<(String, String, &'static str)> {
        let needle = format!("/v0/executions/{execution_id}");
        lock(&self.cuts)
            .iter()
            .filter(|(_, path, _)| path.starts_with(&needle))
            .cloned()
            .collect()
    }

    pub(crate) fn settles(&self) -> Vec<SettleCall> {
        lock(&self.settles).clone()
    }
}
