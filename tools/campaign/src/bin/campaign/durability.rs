//! The kernel-kill fault and what it must not break: no recorded event lost. Just before each
//! `SIGKILL` the driver reads the event log of every execution; once the kernel is back, and
//! again at the end, each of those logs must be a prefix of the same execution's log.

use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt;
use rebuno::wire::Event;

use crate::kernel::{KernelHandle, Snapshot};
use crate::ledger::Ledger;
use crate::verify::Violation;

/// The invariant's name in reports.
const NO_EVENT_LOST: &str = "no recorded event lost across a kernel restart";

/// Event logs read before kernel kills, and what the checks after the restarts found.
#[derive(Debug, Default)]
pub(crate) struct Witness {
    /// (kill number, execution, its log read just before that kill).
    reads: Mutex<Vec<(u64, String, Vec<Event>)>>,
    violations: Mutex<Vec<Violation>>,
    /// Events compared (each read event against the log after the restart).
    pub(crate) compared: std::sync::atomic::AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `None` when `before` is a prefix of `after`; otherwise what differs.
fn not_a_prefix(before: &[Event], after: &[Event]) -> Option<String> {
    if after.len() < before.len() {
        let lost: Vec<String> = before[after.len()..]
            .iter()
            .map(|e| format!("{}:{}", e.event_seq, e.kind))
            .collect();
        return Some(format!(
            "{} events before, {} after; lost {lost:?}",
            before.len(),
            after.len()
        ));
    }
    let (at, (was, is)) = before
        .iter()
        .zip(after)
        .enumerate()
        .find(|(_, (b, a))| b != a)?;
    Some(format!(
        "event {} differs: was {} {} at {:?}, now {} {} at {:?}",
        at + 1,
        was.kind,
        was.payload,
        was.occurred_at,
        is.kind,
        is.payload,
        is.occurred_at
    ))
}

/// The logs of `ids`, 8 reads at a time (an execution the kernel did not answer for is left out).
async fn read_logs(kernel: &KernelHandle, ids: Vec<String>) -> Vec<(String, Vec<Event>)> {
    futures_util::stream::iter(ids)
        .map(|id| async move {
            let log = kernel.events(&id).await;
            (id, log)
        })
        .buffer_unordered(8)
        .filter_map(|(id, log)| async move { log.map(|log| (id, log)) })
        .collect()
        .await
}

impl Witness {
    /// One kernel-kill fault: reads every execution's log, kills the kernel, restarts it after
    /// `pause` on the same ports and directory, and checks the logs against the new kernel's.
    pub(crate) async fn kill_and_restart(
        &self,
        kernel: &KernelHandle,
        ledger: &Ledger,
        pause: Duration,
    ) -> Result<(), String> {
        let all = kernel.list_all().await.unwrap_or_default();
        if all.iter().any(|e| !e.status.is_terminal()) {
            ledger
                .counters
                .kernel_kills_live
                .fetch_add(1, Ordering::Relaxed);
        }
        let before = read_logs(kernel, all.iter().map(|e| e.id.clone()).collect()).await;
        let kill = ledger.counters.kernel_kills.fetch_add(1, Ordering::Relaxed) + 1;
        let down = tokio::time::Instant::now();
        kernel
            .restart(pause)
            .await
            .map_err(|e| format!("kernel restart {kill} failed: {e}"))?;
        ledger.note_kernel_downtime(down.elapsed());
        let ids = before.iter().map(|(id, _)| id.clone()).collect();
        let after: std::collections::HashMap<String, Vec<Event>> =
            read_logs(kernel, ids).await.into_iter().collect();
        for (id, log) in &before {
            self.check(
                id,
                log,
                after.get(id).map(Vec::as_slice),
                "after the restart",
            );
        }
        lock(&self.reads).extend(before.into_iter().map(|(id, log)| (kill, id, log)));
        Ok(())
    }

    /// Checks one log read before a kill against `now` (`None`: the kernel lost the execution).
    fn check(&self, id: &str, before: &[Event], now: Option<&[Event]>, when: &str) {
        self.compared
            .fetch_add(before.len() as u64, Ordering::Relaxed);
        let detail = match now {
            None => Some(format!(
                "{} events before; the execution is gone {when}",
                before.len()
            )),
            Some(now) => not_a_prefix(before, now).map(|d| format!("{when}: {d}")),
        };
        if let Some(detail) = detail {
            lock(&self.violations).push(Violation {
                invariant: NO_EVENT_LOST,
                execution: id.to_owned(),
                detail,
            });
        }
    }

    /// Checks every log read before a kill against the final logs; returns every violation.
    pub(crate) fn finish(&self, end: &Snapshot) -> Vec<Violation> {
        let reads = std::mem::take(&mut *lock(&self.reads));
        for (kill, id, log) in &reads {
            let now = end.events(id);
            let now = end.execution(id).map(|_| now.as_slice());
            self.check(
                id,
                log,
                now,
                &format!("at the end (read before kill {kill})"),
            );
        }
        std::mem::take(&mut *lock(&self.violations))
    }
}
