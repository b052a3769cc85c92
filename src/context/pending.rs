//! Work a value started but could not finish where it was dropped.
//!
//! `Drop` cannot `.await`, and the core may not spawn. So a streamed LLM response whose body is
//! dropped before its end hands its "record what arrived" future here; the execution runs the
//! set before its next kernel submit (the order the Python SDK keeps: a closed stream is
//! recorded before the next call) and before the dispatch ends.

use std::sync::Mutex;

use super::{ExecutionContext, lock};
use crate::rt::BoxFuture;

/// Futures handed over by dropped values, run in order.
#[derive(Default)]
pub(super) struct Pending(Mutex<Vec<BoxFuture<'static, ()>>>);

impl ExecutionContext {
    /// Hands `work` to the execution, to run before its next submit or the end of the dispatch.
    pub(crate) fn defer(&self, work: BoxFuture<'static, ()>) {
        lock(&self.inner.pending.0).push(work);
    }

    /// Runs every deferred future, including any deferred while they run.
    pub(crate) async fn settle(&self) {
        loop {
            let batch = std::mem::take(&mut *lock(&self.inner.pending.0));
            if batch.is_empty() {
                return;
            }
            for work in batch {
                work.await;
            }
        }
    }
}
