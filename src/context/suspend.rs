//! Suspending the execution once every call in flight waits (on a subagent), so the dispatch
//! releases its worker instead of idling until the children finish.

use futures_channel::oneshot;

use super::{ExecutionContext, lock};
use crate::error::{Error, Result};

/// In-flight tool and step calls, and those of them that wait.
#[derive(Debug, Default)]
pub(crate) struct Calls {
    in_flight: usize,
    waiting: Vec<oneshot::Sender<Result<bool>>>,
}

/// Counts one call in flight until dropped.
#[derive(Debug)]
pub(crate) struct InFlight<'a>(&'a ExecutionContext);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut calls = lock(&self.0.inner.calls);
        calls.in_flight = calls.in_flight.saturating_sub(1);
    }
}

impl ExecutionContext {
    /// Counts a tool or step call as in flight while the guard lives.
    pub(crate) fn call_started(&self) -> InFlight<'_> {
        lock(&self.inner.calls).in_flight += 1;
        InFlight(self)
    }

    /// After a call finished: the calls still in flight may now all be waiting.
    pub(crate) async fn call_finished(&self, guard: InFlight<'_>) {
        drop(guard);
        self.suspend_if_idle().await;
    }

    /// Waits until every call in flight waits, then returns whether the kernel suspended the
    /// execution (`true`: the dispatch must end; its steps settle while nothing runs).
    pub(crate) async fn await_idle(&self) -> Result<bool> {
        let (sender, receiver) = oneshot::channel();
        lock(&self.inner.calls).waiting.push(sender);
        self.suspend_if_idle().await;
        receiver.await.unwrap_or_else(|_| Err(Error::blocked()))
    }

    /// If every call in flight waits, asks the kernel to suspend and tells the waiters.
    async fn suspend_if_idle(&self) {
        let waiters = {
            let mut calls = lock(&self.inner.calls);
            if calls.waiting.is_empty() || calls.waiting.len() < calls.in_flight {
                return;
            }
            std::mem::take(&mut calls.waiting)
        };
        let outcome = match self.control_flow() {
            Some(_) => Ok(true),
            None => self
                .kernel()
                .suspend(self.id(), self.lease())
                .await
                .map_err(|e| self.note(e)),
        };
        tracing::debug!(waiters = waiters.len(), suspended = ?outcome.as_ref().ok(), "every call waits");
        for waiter in waiters {
            let _ = waiter.send(outcome.as_ref().copied().map_err(Error::clone_shallow));
        }
    }
}
