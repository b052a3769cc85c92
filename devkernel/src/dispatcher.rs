//! Delivery: claim a dispatch, POST the signed webhook, record the outcome, retry with backoff;
//! and the sweeper that reclaims expired leases and expires approvals (PROTOCOL.md §1.3).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use rebuno::Secret;
use rebuno::signing::sign_webhook;
use tokio::time::Instant;
use tracing::Instrument;
use uuid::Uuid;

use crate::kernel::{Followups, Kernel, now};
use crate::store::DispatchStatus;

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

/// What a claim found.
#[derive(Debug)]
pub(crate) enum Claim {
    /// Deliver this attempt now.
    Deliver(Job),
    /// Not due yet.
    Wait(Instant),
    /// Nothing to do (claimed elsewhere, retired, or the execution failed).
    Done,
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

/// `min(base * 2^(attempt-1), cap) + uniform(0, 25%)`.
fn backoff(base: Duration, cap: Duration, attempt: u32) -> Duration {
    let exp = attempt.saturating_sub(1).min(20);
    jittered(base.saturating_mul(1u32 << exp).min(cap))
}

/// `delay + uniform(0, 25%)`.
pub(crate) fn jittered(delay: Duration) -> Duration {
    let jitter = RandomState::new().build_hasher().finish() % 1000;
    delay + delay.mul_f64(0.25 * jitter as f64 / 1000.0)
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
                Claim::Wait(at) => tokio::time::sleep_until(at).await,
                Claim::Deliver(job) => {
                    let delivered = self.post(&job).await;
                    if !self.record_delivery(&job, delivered) {
                        return;
                    }
                }
            }
        }
    }

    /// Claims a due dispatch: attempt + 1, in flight, occurrence counters cleared.
    pub(crate) fn claim(&self, execution_id: Uuid, dispatch_id: Uuid) -> Claim {
        let Some(cell) = self.store().execution(execution_id) else {
            return Claim::Done;
        };
        let Some(agent) = self.store().agent(&cell.agent_id) else {
            return Claim::Done;
        };
        let lease = self.lease_period(&cell.agent_id);
        let max_attempts = self.config().max_attempts;
        let current = now();
        let (claim, followups) = {
            let mut state = cell.lock();
            let terminal = state.exec.status.is_terminal();
            let Some(dispatch) = state.dispatch_mut(dispatch_id) else {
                return Claim::Done;
            };
            if !matches!(
                dispatch.status,
                DispatchStatus::Pending | DispatchStatus::Failed
            ) {
                return Claim::Done;
            }
            if dispatch.next_attempt_at > current {
                return Claim::Wait(dispatch.next_attempt_at);
            }
            if terminal {
                dispatch.status = DispatchStatus::Exhausted;
                let payload = dispatch.payload(execution_id, "exhausted");
                state.append("dispatch.discarded", payload);
                return Claim::Done;
            }
            if dispatch.attempt >= max_attempts {
                let followups = self.fail_locked(&mut state, "dispatch_exhausted");
                (Claim::Done, followups)
            } else {
                dispatch.attempt += 1;
                dispatch.status = DispatchStatus::InFlight;
                dispatch.locked_at = current;
                dispatch.lease = lease;
                let attempt = dispatch.attempt;
                state.counters.retain(|key, _| key.0 != dispatch_id);
                let job = Job {
                    execution_id,
                    dispatch_id,
                    attempt,
                    url: agent.agent.webhook_url.clone(),
                    secret: agent.secret,
                    body: webhook_body(execution_id, dispatch_id, attempt, lease),
                };
                (Claim::Deliver(job), Followups::default())
            }
        };
        cell.publish();
        self.run(followups);
        claim
    }

    /// POSTs the webhook; `true` on any 2xx.
    async fn post(&self, job: &Job) -> bool {
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
        match response {
            Ok(response) if response.status().is_success() => {
                tracing::debug!(attempt = job.attempt, "webhook delivered");
                true
            }
            Ok(response) => {
                tracing::warn!(attempt = job.attempt, status = %response.status(), "webhook refused");
                false
            }
            Err(error) => {
                tracing::warn!(attempt = job.attempt, %error, "webhook failed");
                false
            }
        }
    }

    /// Records a delivery outcome; `true` when the loop should claim again later.
    fn record_delivery(&self, job: &Job, delivered: bool) -> bool {
        self.metrics().delivery(delivered);
        let Some(cell) = self.store().execution(job.execution_id) else {
            return false;
        };
        let config = self.config();
        let (retry, followups) = {
            let mut state = cell.lock();
            if state.exec.status.is_terminal() {
                return false;
            }
            let Some(dispatch) = state.dispatch_mut(job.dispatch_id) else {
                return false;
            };
            if dispatch.attempt != job.attempt || dispatch.status != DispatchStatus::InFlight {
                // Superseded by a reclaim, or retired by a block: this attempt no longer counts.
                return false;
            }
            if delivered {
                let payload = dispatch.payload(job.execution_id, "acked");
                state.append("dispatch.acked", payload);
                return false;
            }
            let exhausted = dispatch.attempt >= config.max_attempts;
            let status = if exhausted { "exhausted" } else { "failed" };
            if !exhausted {
                dispatch.status = DispatchStatus::Failed;
                dispatch.next_attempt_at =
                    now() + backoff(config.backoff_base, config.backoff_cap, dispatch.attempt);
            }
            let payload = dispatch.payload(job.execution_id, status);
            state.append("dispatch.failed", payload);
            if exhausted {
                let followups = self.fail_locked(&mut state, "dispatch_exhausted");
                (false, followups)
            } else {
                (true, Followups::default())
            }
        };
        cell.publish();
        self.run(followups);
        retry
    }

    /// Reclaims the live in-flight dispatch of an execution now and delivers the next attempt.
    /// Returns the new attempt number.
    pub(crate) fn redeliver(&self, execution_id: Uuid) -> Option<u32> {
        let cell = self.store().execution(execution_id)?;
        let dispatch_id = {
            let mut state = cell.lock();
            let dispatch = state
                .dispatches
                .iter_mut()
                .rev()
                .find(|d| d.status == DispatchStatus::InFlight)?;
            dispatch.status = DispatchStatus::Pending;
            dispatch.next_attempt_at = now();
            dispatch.id
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

    /// Reclaims in-flight dispatches whose lease expired.
    fn reap(&self) {
        let current = now();
        for id in self.store().live() {
            let Some(cell) = self.store().execution(id) else {
                self.store().unmark_live(id);
                continue;
            };
            let expired: Vec<Uuid> = {
                let mut state = cell.lock();
                if !state.has_live_dispatch() {
                    drop(state);
                    self.store().unmark_live(id);
                    continue;
                }
                state
                    .dispatches
                    .iter_mut()
                    .filter(|d| {
                        d.status == DispatchStatus::InFlight && d.locked_at + d.lease <= current
                    })
                    .map(|d| {
                        d.status = DispatchStatus::Pending;
                        d.next_attempt_at = current;
                        d.id
                    })
                    .collect()
            };
            for dispatch in expired {
                tracing::info!(execution = %id, %dispatch, "lease expired; reclaiming");
                self.spawn_delivery(id, dispatch);
            }
        }
    }

    /// Starts the sweeper (lease reclaim, approval expiry) until shutdown.
    pub(crate) fn spawn_sweeper(&self) {
        let kernel = self.clone();
        let token = self.shutdown_token().clone();
        let period = self.config().sweep_interval;
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(period);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = token.cancelled() => return,
                    _ = ticker.tick() => {
                        kernel.reap();
                        for exec in kernel.executions_with_pending_approvals() {
                            let followups = kernel.expire_approvals(exec);
                            kernel.run(followups);
                        }
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn backoff_doubles_and_caps() {
        let base = Duration::from_secs(1);
        let cap = Duration::from_secs(30);
        for (attempt, floor) in [(1, 1), (2, 2), (3, 4), (6, 30), (9, 30)] {
            let delay = backoff(base, cap, attempt);
            let floor = Duration::from_secs(floor);
            assert!(
                delay >= floor && delay <= floor.mul_f64(1.25),
                "{attempt}: {delay:?}"
            );
        }
    }
}
