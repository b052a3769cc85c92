//! Delivery (PROTOCOL.md §1.3): claim a dispatch, POST the signed webhook, record the
//! outcome (every attempt's, visibly), retry with backoff; and the sweeper that reclaims
//! expired leases and expires approvals.

mod claim;
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

    fn spawn_loop(&self, execution_id: Uuid, dispatch_id: Uuid, first: Option<Job>) {
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

    async fn delivery_loop(&self, execution_id: Uuid, dispatch_id: Uuid, mut first: Option<Job>) {
        loop {
            let claim = match first.take() {
                Some(job) => Claim::Deliver(job),
                None => self.claim(execution_id, dispatch_id),
            };
            match claim {
                Claim::Done => return,
                Claim::Wait(at) => self.clock().sleep_until(at).await,
                Claim::Deliver(job) => {
                    let delivered = self.post(&job).await;
                    if !self.record_delivery(&job, delivered) {
                        return;
                    }
                }
            }
        }
    }

    /// Reclaims the live in-flight dispatch of an execution now and delivers the next attempt.
    /// Returns the new attempt number.
    pub(crate) fn redeliver(&self, execution_id: Uuid) -> Option<u32> {
        let cell = self.store().execution(execution_id)?;
        let dispatch_id = {
            let mut state = cell.lock();
            let dispatch = state
                .dispatches
                .iter()
                .rev()
                .find(|d| d.status == DispatchStatus::InFlight)?
                .id;
            sweep::reclaim(&mut state, dispatch, None);
            dispatch
        };
        match self.claim(execution_id, dispatch_id) {
            Claim::Deliver(job) => {
                let attempt = job.attempt;
                self.spawn_loop(execution_id, dispatch_id, Some(job));
                Some(attempt)
            }
            Claim::Wait(_) | Claim::Done => None,
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
