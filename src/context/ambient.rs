//! The ambient execution context: a per-thread slot swapped in around every poll.
//!
//! This is how a task-local works, without tying the core to Tokio: while a [`Scoped`] future
//! is being polled its context is current on that thread, and the previous one is restored
//! afterwards, even if the poll panics.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use super::ExecutionContext;

thread_local! {
    static CURRENT: RefCell<Option<ExecutionContext>> = const { RefCell::new(None) };
}

/// The context of the execution whose handler is being polled on this thread.
pub(crate) fn current() -> Option<ExecutionContext> {
    CURRENT.with(|slot| slot.borrow().clone())
}

pin_project! {
    /// A future that runs with an execution context current. Made by
    /// [`ExecutionContext::scope`].
    #[derive(Debug)]
    #[must_use = "futures do nothing unless polled"]
    pub struct Scoped<F> {
        context: ExecutionContext,
        #[pin]
        future: F,
    }
}

impl<F> Scoped<F> {
    pub(crate) fn new(context: ExecutionContext, future: F) -> Self {
        Self { context, future }
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _restore = Swap::enter(this.context.clone());
        this.future.poll(cx)
    }
}

/// Puts a context in the slot and restores the previous one on drop.
struct Swap(Option<ExecutionContext>);

impl Swap {
    fn enter(context: ExecutionContext) -> Self {
        Self(CURRENT.with(|slot| slot.replace(Some(context))))
    }
}

impl Drop for Swap {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|slot| *slot.borrow_mut() = previous);
    }
}
