//! The kernel → agent webhook proxy: the kernel's only webhook URL. It records every claim,
//! routes each attempt to one agent slot, and delays, duplicates (to the same process only),
//! replays stale attempts later (reordering) and asks for host-deadline cuts.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::time::Instant;

use crate::agents::Slot;
use crate::ledger::{Claim, Ledger};
use rebuno_campaign::{DEADLINE_HEADER, Rng};

/// A delivery the proxy made, kept for stale replays.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    pub(crate) execution_id: String,
    pub(crate) dispatch_id: String,
    pub(crate) attempt: u32,
    pub(crate) slot: usize,
    pub(crate) generation: u64,
    body: Bytes,
    signature: String,
}

/// Webhook fault rates.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rates {
    pub(crate) duplicate: f64,
    pub(crate) delay: f64,
    pub(crate) deadline: f64,
}

impl Rates {
    /// No webhook faults.
    pub(crate) const NONE: Self = Self {
        duplicate: 0.0,
        delay: 0.0,
        deadline: 0.0,
    };
}

#[derive(Debug)]
pub(crate) struct WebhookProxy {
    ledger: Arc<Ledger>,
    slots: Vec<Arc<Slot>>,
    rng: Mutex<Rng>,
    rates: Rates,
    client: reqwest::Client,
    deliveries: Mutex<Vec<Delivery>>,
    /// Latest delivered attempt per dispatch.
    latest: Mutex<HashMap<String, u32>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl WebhookProxy {
    /// Starts the proxy; returns it and its webhook URL.
    pub(crate) async fn start(
        ledger: Arc<Ledger>,
        slots: Vec<Arc<Slot>>,
        seed: u64,
        rates: Rates,
    ) -> std::io::Result<(Arc<Self>, String)> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/webhook", listener.local_addr()?);
        let client = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(5))
            .build()
            .map_err(std::io::Error::other)?;
        let proxy = Arc::new(Self {
            ledger,
            slots,
            rng: Mutex::new(Rng::derive(seed, 0x3000)),
            rates,
            client,
            deliveries: Mutex::new(Vec::new()),
            latest: Mutex::new(HashMap::new()),
        });
        let server = Arc::clone(&proxy);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let proxy = Arc::clone(&server);
                let service = hyper::service::service_fn(
                    move |request: http::Request<hyper::body::Incoming>| {
                        let proxy = Arc::clone(&proxy);
                        async move { Ok::<_, Infallible>(proxy.handle(request).await) }
                    },
                );
                tokio::spawn(async move {
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok((proxy, url))
    }

    fn roll(&self) -> Rng {
        let mut rng = lock(&self.rng);
        Rng::new(rng.next_u64())
    }

    /// Handles one webhook from the kernel: records the claim, routes the attempt to a slot
    /// (maybe delayed, maybe with a host deadline), delivers it, maybe duplicates it later, and
    /// answers the kernel with the agent's status (`502` when the agent was unreachable).
    async fn handle(
        &self,
        request: http::Request<hyper::body::Incoming>,
    ) -> http::Response<Full<Bytes>> {
        let seen_at = Instant::now();
        let signature = request
            .headers()
            .get("rebuno-signature")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let Ok(body) = request.into_body().collect().await.map(|b| b.to_bytes()) else {
            return status(400);
        };
        let (execution_id, dispatch_id, attempt) = attempt_of(&body);
        self.record_claim(&execution_id, &dispatch_id, attempt, seen_at);
        let mut rng = self.roll();
        let slot = self.pick_slot(&mut rng);
        let faults = self.ledger.faults_on();
        if faults && rng.chance(self.rates.delay) {
            self.ledger.counters.delayed.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(rng.range(20, 1500))).await;
        }
        let deadline = (faults && rng.chance(self.rates.deadline)).then(|| rng.range(200, 2500));
        self.ledger.wait_thawed(slot).await;
        let mut delivery = Delivery {
            execution_id,
            dispatch_id,
            attempt,
            slot,
            generation: 0,
            body,
            signature,
        };
        let answer = self.deliver(&mut delivery, deadline).await;
        lock(&self.deliveries).push(delivery.clone());
        if faults && rng.chance(self.rates.duplicate) {
            self.duplicate_later(delivery, Duration::from_millis(rng.range(0, 800)));
        }
        match answer {
            Some(code) => status(code),
            None => status(502),
        }
    }

    /// Records that the kernel claimed `attempt` of `dispatch_id` (seen at `seen_at`, for the
    /// fencing check), keeps the dispatch's latest attempt (for stale replays), and counts the
    /// delivery.
    fn record_claim(&self, execution_id: &str, dispatch_id: &str, attempt: u32, seen_at: Instant) {
        self.ledger.record_claim(
            dispatch_id,
            Claim {
                execution_id: execution_id.to_owned(),
                attempt,
                seen_at,
            },
        );
        {
            let mut latest = lock(&self.latest);
            let entry = latest.entry(dispatch_id.to_owned()).or_insert(0);
            *entry = (*entry).max(attempt);
        }
        self.ledger
            .counters
            .deliveries
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Picks the slot of a delivery: a random live one, or any one when none is live (the
    /// kernel retries when the chosen one is down).
    fn pick_slot(&self, rng: &mut Rng) -> usize {
        let live: Vec<usize> = self
            .slots
            .iter()
            .filter(|s| s.alive.load(Ordering::SeqCst))
            .map(|s| s.index)
            .collect();
        if live.is_empty() {
            rng.range(0, self.slots.len() as u64 - 1) as usize
        } else {
            live[rng.range(0, live.len() as u64 - 1) as usize]
        }
    }

    /// Sends `delivery` to its slot while holding the slot's generation (so a kill waits for
    /// it, and a later repeat can go to the same process only), counts a host deadline, and
    /// traces the delivery. Returns the agent's status, `None` when it was unreachable.
    async fn deliver(&self, delivery: &mut Delivery, deadline: Option<u64>) -> Option<u16> {
        let answer = {
            let generation = self.slots[delivery.slot].generation.read().await;
            delivery.generation = *generation;
            let answer = self.send(delivery, deadline).await;
            drop(generation);
            answer
        };
        if deadline.is_some() {
            self.ledger
                .counters
                .deadlines
                .fetch_add(1, Ordering::Relaxed);
        }
        self.ledger.trace(
            &delivery.execution_id,
            format!(
                "webhook dispatch {} attempt {} -> slot {} gen {}{} answered {answer:?}",
                short(&delivery.dispatch_id),
                delivery.attempt,
                delivery.slot,
                delivery.generation,
                deadline.map_or(String::new(), |ms| format!(" deadline {ms}ms"))
            ),
        );
        answer
    }

    /// Sends `delivery` again after `pause`, in the background, to the same process only;
    /// counts it as duplicated when it went.
    fn duplicate_later(&self, delivery: Delivery, pause: Duration) {
        let this = self.clone_handle();
        tokio::spawn(async move {
            tokio::time::sleep(pause).await;
            if this.resend(&delivery).await {
                this.ledger
                    .counters
                    .duplicated
                    .fetch_add(1, Ordering::Relaxed);
            }
        });
    }

    fn clone_handle(&self) -> Handle {
        Handle {
            ledger: Arc::clone(&self.ledger),
            slots: self.slots.clone(),
            client: self.client.clone(),
        }
    }

    /// Sends `delivery` to its slot; the agent's status, `None` when it was unreachable.
    async fn send(&self, delivery: &Delivery, deadline: Option<u64>) -> Option<u16> {
        self.clone_handle().post(delivery, deadline).await
    }

    /// Re-sends an attempt the kernel has already superseded, to the process that got it (if it
    /// still lives): a late, reordered delivery. Returns whether one was sent.
    pub(crate) async fn replay_stale(&self, rng: &mut Rng) -> bool {
        let candidates: Vec<Delivery> = {
            let latest = lock(&self.latest);
            lock(&self.deliveries)
                .iter()
                .filter(|d| latest.get(&d.dispatch_id).is_some_and(|l| *l > d.attempt))
                .rev()
                .take(64)
                .cloned()
                .collect()
        };
        if candidates.is_empty() {
            return false;
        }
        let pick = &candidates[rng.range(0, candidates.len() as u64 - 1) as usize];
        let sent = self.clone_handle().resend(pick).await;
        if sent {
            self.ledger
                .counters
                .stale_replays
                .fetch_add(1, Ordering::Relaxed);
        }
        sent
    }

    /// The slot the newest attempt of `execution_id` went to.
    pub(crate) fn current_slot(&self, execution_id: &str) -> Option<usize> {
        lock(&self.deliveries)
            .iter()
            .rev()
            .find(|d| d.execution_id == execution_id)
            .map(|d| d.slot)
    }
}

/// What a background re-send needs.
#[derive(Debug, Clone)]
struct Handle {
    ledger: Arc<Ledger>,
    slots: Vec<Arc<Slot>>,
    client: reqwest::Client,
}

impl Handle {
    async fn post(&self, delivery: &Delivery, deadline: Option<u64>) -> Option<u16> {
        let slot = &self.slots[delivery.slot];
        let port = if deadline.is_some() {
            slot.deadline_port
        } else {
            slot.port
        };
        let mut request = self
            .client
            .post(format!("http://127.0.0.1:{port}/webhook"))
            .header("content-type", "application/json")
            .header("rebuno-signature", &delivery.signature)
            .header("rebuno-execution-id", &delivery.execution_id)
            .body(delivery.body.clone());
        if let Some(ms) = deadline {
            request = request.header(DEADLINE_HEADER, ms.to_string());
        }
        request.send().await.ok().map(|r| r.status().as_u16())
    }

    /// Sends `delivery` again, only to the same process generation. Returns whether it went.
    async fn resend(&self, delivery: &Delivery) -> bool {
        self.ledger.wait_thawed(delivery.slot).await;
        let generation = self.slots[delivery.slot].generation.read().await;
        if *generation != delivery.generation
            || !self.slots[delivery.slot].alive.load(Ordering::SeqCst)
        {
            return false;
        }
        let answer = self.post(delivery, None).await;
        drop(generation);
        self.ledger.trace(
            &delivery.execution_id,
            format!(
                "repeat of dispatch {} attempt {} -> slot {} gen {} answered {answer:?}",
                short(&delivery.dispatch_id),
                delivery.attempt,
                delivery.slot,
                delivery.generation
            ),
        );
        answer.is_some()
    }
}

/// The last 6 characters of an id.
pub(crate) fn short(id: &str) -> &str {
    &id[id.len().saturating_sub(6)..]
}

/// The execution id, dispatch id and attempt a webhook's payload names (empty and 0 when
/// missing, so a malformed payload is still delivered and traced).
fn attempt_of(body: &Bytes) -> (String, String, u32) {
    let payload: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let execution_id = payload["execution_id"].as_str().unwrap_or("").to_owned();
    let dispatch_id = payload["dispatch_id"].as_str().unwrap_or("").to_owned();
    let attempt = u32::try_from(payload["dispatch_attempt"].as_u64().unwrap_or(0)).unwrap_or(0);
    (execution_id, dispatch_id, attempt)
}

fn status(code: u16) -> http::Response<Full<Bytes>> {
    let mut response = http::Response::new(Full::new(Bytes::new()));
    *response.status_mut() =
        http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::BAD_GATEWAY);
    response
}
