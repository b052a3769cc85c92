//! Delivery (PROTOCOL.md §1.3): claim a dispatch, POST the signed webhook, record the
//! outcome (every attempt's, visibly), retry with backoff; and the sweeper that reclaims
//! expired leases and expires approvals.

mod claim;
mod force;
mod post;
mod sweep;

use std::time::Duration;

use rebuno::Secret;
use tokio::time::Instant;
use tracing::Instrument;
use uuid::Uuid;

use super::Kernel;
use crate::store::DispatchStatus;

pub(crate) use claim::Claim;

/// A delivery worker, held from the claim of an attempt until its outcome is recorded.
type Worker = tokio::sync::OwnedSemaphorePermit;

/// One claimed delivery attempt.
#[derive(Debug)]
pub(crate) struct Job {
    execution_id: Uuid,
    dispatch_id: Uuid,
    attempt: u32,
    url: String,
    secret: Secret,
    body: String,
}

/// The webhook body, byte-for-byte Go's `json.Marshal` of the payload struct.
pub(crate) fn webhook_body(
    execution_id: Uuid,
    dispatch_id: Uuid,
    attempt: u32,
    lease: Duration,
) -> String {
    let secs = lease.as_secs_f64();
    let lease = if secs.fract() == 0.0 {
        format!("{}", lease.as_secs())
    } else {
        format!("{secs}")
    };
    format!(
        r#"{{"execution_id":"{execution_id}","dispatch_id":"{dispatch_id}","dispatch_attempt":{attempt},"lease_timeout_seconds":{lease}}}"#
    )
}

impl Kernel {
    /// Starts a background delivery loop for a dispatch.
    pub(crate) fn spawn_delivery(&self, execution_id: Uuid, dispatch_id: Uuid) {
        self.spawn_loop(execution_id, dispatch_id, None);
    }

    fn spawn_loop(&self, execution_id: Uuid, dispatch_id: Uuid, first: Option<(Job, Worker)>) {
        let kernel = self.clone();
        let token = self.shutdown_token().clone();
        let span =
            tracing::info_span!("delivery", execution = %execution_id, dispatch = %dispatch_id);
        tokio::spawn(
            async move {
                tokio::select! {
                    () = token.cancelled() => {}
                    () = kernel.delivery_loop(execution_id, dispatch_id, first) => {}
                }
            }
            .instrument(span),
        );
    }

    /// Delivers a dispatch until it is acknowledged, retired or out of attempts. Each attempt
    /// first waits for a free worker (Go's `DispatchConcurrency`), and only then is claimed:
    /// a dispatch waiting for one has used no attempt and holds no lease.
    async fn delivery_loop(
        &self,
        execution_id: Uuid,
        dispatch_id: Uuid,
        mut first: Option<(Job, Worker)>,
    ) {
        loop {
            let (claim, worker) = match first.take() {
                Some((job, worker)) => (Claim::Deliver(job), worker),
                None => {
                    let Ok(worker) = self.inner.workers.clone().acquire_owned().await else {
                        return;
                    };
                    (self.claim(execution_id, dispatch_id), worker)
                }
            };
            match claim {
                Claim::Done => return,
                Claim::Wait(at) => {
                    drop(worker);
                    self.clock().sleep_until(at).await;
                }
                Claim::Deliver(job) => {
                    let delivered = self.post(&job).await;
                    let again = self.record_delivery(&job, delivered);
                    drop(worker);
                    if !again {
                        return;
                    }
                }
            }
        }
    }

    /// Reclaims the live in-flight dispatch of an execution now and delivers the next attempt.
    /// Returns the new attempt number. With every worker busy, the dispatch waits for one like
    /// any other (claimed then, as the attempt returned here). With `why`, the reclaim is
    /// recorded as a lease expiry's is (`dispatch.reclaimed`, `error: why`).
    pub(crate) fn redeliver(&self, execution_id: Uuid, why: Option<&str>) -> Option<u32> {
        let cell = self.store().execution(execution_id)?;
        let (dispatch_id, attempt) = {
            let mut state = cell.lock();
            let dispatch = state
                .dispatches
                .iter()
                .rev()
                .find(|d| d.status == DispatchStatus::InFlight)?;
            let (id, attempt) = (dispatch.id, dispatch.attempt);
            sweep::reclaim(&mut state, id, why);
            (id, attempt)
        };
        let worker = self.inner.workers.clone().try_acquire_owned();
        if worker.is_err() && attempt < self.config().max_attempts {
            self.spawn_delivery(execution_id, dispatch_id);
            return Some(attempt + 1);
        }
        match (self.claim(execution_id, dispatch_id), worker) {
            (Claim::Deliver(job), Ok(worker)) => {
                let attempt = job.attempt;
                self.spawn_loop(execution_id, dispatch_id, Some((job, worker)));
                Some(attempt)
            }
            _ => None,
        }
    }
}

/// When a claim may next happen.
fn due(status: DispatchStatus, next: Instant, now: Instant) -> Option<Instant> {
    matches!(status, DispatchStatus::Pending | DispatchStatus::Failed)
        .then_some(next)
        .filter(|at| *at > now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebuno::signing::sign_webhook;

    #[test]
    fn webhook_body_matches_go() {
        let e = Uuid::parse_str("0192f1a0-0000-7000-8000-000000000000").unwrap();
        let d = Uuid::parse_str("01920000-0000-7000-8000-000000000001").unwrap();
        let body = webhook_body(e, d, 1, Duration::from_secs(120));
        assert_eq!(
            body,
            r#"{"execution_id":"0192f1a0-0000-7000-8000-000000000000","dispatch_id":"01920000-0000-7000-8000-000000000001","dispatch_attempt":1,"lease_timeout_seconds":120}"#
        );
        assert_eq!(
            sign_webhook(&Secret::new("dev-secret"), body.as_bytes()),
            "sha256=2bf2615ba841e4e4b564cfbdc923b8ceea445f7f16ddc11cec13daa5f844cfec"
        );
        let half = webhook_body(e, d, 2, Duration::from_millis(600_500));
        assert!(half.ends_with(r#""lease_timeout_seconds":600.5}"#));
    }
}
