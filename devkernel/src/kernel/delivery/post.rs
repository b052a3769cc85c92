//! POSTing the signed webhook and recording what the attempt met.

use rebuno::signing::sign_webhook;

use super::Job;
use crate::backoff::backoff;
use crate::event::{DeliveryOutcome, DispatchChanged, DispatchState, EventBody};
use crate::kernel::{Followups, Kernel};
use crate::store::{DispatchStatus, ExecState};

impl Kernel {
    /// POSTs the webhook: `Ok` on any 2xx, else what the attempt met (the agent's status,
    /// or the class of transport error: never the URL or the body).
    pub(super) async fn post(&self, job: &Job) -> Result<(), DeliveryOutcome> {
        let signature = sign_webhook(&job.secret, job.body.as_bytes());
        let response = self
            .http()
            .post(&job.url)
            .header("Content-Type", "application/json")
            .header("Rebuno-Signature", signature)
            .header("Rebuno-Execution-Id", job.execution_id.to_string())
            .body(job.body.clone())
            .send()
            .await;
        let outcome = |http_status: Option<u16>, error: &str| DeliveryOutcome {
            attempt: job.attempt,
            http_status,
            error: error.to_owned(),
        };
        match response {
            Ok(response) if response.status().is_success() => {
                tracing::debug!(attempt = job.attempt, "webhook delivered");
                Ok(())
            }
            Ok(response) => {
                tracing::warn!(attempt = job.attempt, status = %response.status(), "webhook refused");
                Err(outcome(Some(response.status().as_u16()), "http_status"))
            }
            Err(error) => {
                let class = transport_class(&error);
                tracing::warn!(attempt = job.attempt, error = class, "webhook failed");
                Err(outcome(None, class))
            }
        }
    }

    /// Records a delivery outcome; `true` when the loop should claim again later.
    pub(super) fn record_delivery(
        &self,
        job: &Job,
        delivered: Result<(), DeliveryOutcome>,
    ) -> bool {
        self.metrics().delivery(delivered.is_ok());
        let Some(cell) = self.store().execution(job.execution_id) else {
            return false;
        };
        let (retry, followups) = {
            let mut state = cell.lock();
            self.record_locked(&mut state, job, delivered)
        };
        cell.publish();
        self.run(followups);
        retry
    }

    fn record_locked(
        &self,
        state: &mut ExecState,
        job: &Job,
        delivered: Result<(), DeliveryOutcome>,
    ) -> (bool, Followups) {
        let config = self.config();
        let now = self.clock().now();
        let failure = match delivered {
            // Recorded whatever happened during the POST (a block retiring the dispatch, a
            // reclaim, the run ending), as the Go kernel appends it: the agent did take it.
            Ok(()) => {
                let acked = DispatchChanged::new(
                    job.dispatch_id,
                    job.execution_id,
                    DispatchState::Acked,
                    job.attempt,
                );
                state.record(EventBody::DispatchAcked(acked));
                return (false, Followups::default());
            }
            Err(failure) => failure,
        };
        let live = !state.exec.status.is_terminal()
            && state
                .dispatch_mut(job.dispatch_id)
                .is_some_and(|d| d.attempt == job.attempt && d.status == DispatchStatus::InFlight);
        // Superseded by a reclaim, retired by a block, or ended: this attempt no longer counts.
        let Some(dispatch) = state.dispatch_mut(job.dispatch_id).filter(|_| live) else {
            return (false, Followups::default());
        };
        let exhausted = dispatch.attempt >= config.max_attempts;
        dispatch.last_outcome = Some(failure.clone());
        let status = if exhausted {
            DispatchState::Exhausted
        } else {
            dispatch.status = DispatchStatus::Failed;
            dispatch.next_attempt_at =
                now + backoff(config.backoff_base, config.backoff_cap, dispatch.attempt);
            DispatchState::Failed
        };
        let event = DispatchChanged::failed(job.dispatch_id, job.execution_id, status, &failure);
        state.record(EventBody::DispatchFailed(event));
        if exhausted {
            (
                false,
                self.fail_after(state, "dispatch_exhausted", Some(failure)),
            )
        } else {
            (true, Followups::default())
        }
    }
}

/// The class of a transport error, safe to record (no URL, no body).
fn transport_class(error: &reqwest::Error) -> &'static str {
    if error.is_timeout() {
        "timeout"
    } else if error.is_connect() {
        "connect"
    } else if error.is_body() || error.is_decode() {
        "body"
    } else {
        "transport"
    }
}
