//! The sweeper: reclaims leases that expired (visibly) and expires overdue approvals.

use uuid::Uuid;

use crate::event::{DeliveryOutcome, DispatchChanged, DispatchState, EventBody};
use crate::kernel::Kernel;
use crate::store::{DispatchStatus, ExecState};

/// Takes back an in-flight dispatch: pending again, due now. With `why` (a lease the agent
/// let expire) it is visible as `dispatch.reclaimed`; an explicit redelivery is not a failure.
pub(super) fn reclaim(state: &mut ExecState, dispatch_id: Uuid, why: Option<&str>) {
    let now = state.clock().now();
    let execution_id = state.exec.id;
    let Some(dispatch) = state.dispatch_mut(dispatch_id) else {
        return;
    };
    dispatch.status = DispatchStatus::Pending;
    dispatch.next_attempt_at = now;
    let Some(why) = why else {
        return;
    };
    let outcome = DeliveryOutcome {
        attempt: dispatch.attempt,
        http_status: None,
        error: why.to_owned(),
    };
    dispatch.last_outcome = Some(outcome.clone());
    let event =
        DispatchChanged::failed(dispatch_id, execution_id, DispatchState::Pending, &outcome);
    state.record(EventBody::DispatchReclaimed(event));
}

impl Kernel {
    /// One sweep: expired leases reclaimed, overdue approvals expired, executions past their
    /// deadline cancelled; and, when its own slower period has passed, a retention pass.
    pub(crate) fn sweep(&self) {
        self.reap();
        self.cancel_overdue();
        for exec in self.executions_with_pending_approvals() {
            let followups = self.expire_approvals(exec);
            self.run(followups);
        }
        self.retain();
    }

    /// Cancels (`deadline_exceeded`) the executions whose deadline has passed.
    fn cancel_overdue(&self) {
        if self.config().execution_deadline.is_none() {
            return;
        }
        let now = self.clock().timestamp();
        for cell in self.store().executions_desc() {
            let followups = {
                let mut state = cell.lock();
                let overdue = state.exec.deadline_at.is_some_and(|at| at <= now);
                if !overdue || state.exec.status.is_terminal() {
                    continue;
                }
                tracing::info!(execution = %cell.id, "deadline passed; cancelling");
                self.cancel_locked(&mut state, "deadline_exceeded")
            };
            cell.publish();
            self.run(followups);
        }
    }

    /// Reclaims in-flight dispatches whose lease expired.
    fn reap(&self) {
        for id in self.store().live() {
            let Some(cell) = self.store().execution(id) else {
                self.store().unmark_live(id);
                continue;
            };
            let expired = {
                let mut state = cell.lock();
                if !state.has_live_dispatch() {
                    drop(state);
                    self.store().unmark_live(id);
                    continue;
                }
                reclaim_expired(&mut state)
            };
            for dispatch in expired {
                tracing::info!(execution = %id, %dispatch, "lease expired; reclaiming");
                self.spawn_delivery(id, dispatch);
            }
        }
    }

    /// Starts the sweeper until shutdown: every `sweep_interval`, and whenever a manual clock
    /// moves.
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
                    _ = ticker.tick() => kernel.sweep(),
                    () = kernel.clock().moved() => kernel.sweep(),
                }
            }
        });
    }
}

/// Reclaims every in-flight dispatch whose lease ran out; returns their ids.
fn reclaim_expired(state: &mut ExecState) -> Vec<Uuid> {
    let now = state.clock().now();
    let expired: Vec<Uuid> = state
        .dispatches
        .iter()
        .filter(|d| d.status == DispatchStatus::InFlight && d.locked_at + d.lease <= now)
        .map(|d| d.id)
        .collect();
    for dispatch in &expired {
        reclaim(state, *dispatch, Some("lease_expired"));
    }
    expired
}
