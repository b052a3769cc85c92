//! The ambient execution context: a per-thread slot swapped in around every poll.
//!
//! This is how a task-local works, without tying the core to Tokio: while a [`Scoped`] future
//! is being polled its context is current on that thread, and the previous one is restored
//! afterwards, even if the poll panics.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use super::ExecutionContext;

/// What is current while a scoped future is polled.
#[derive(Clone, Debug)]
struct Ambient {
    context: ExecutionContext,
    /// The step whose body is running, inside a tool or step body.
    step: Option<Arc<StepScope>>,
}

/// A step whose body is running.
#[derive(Debug)]
pub(crate) struct StepScope {
    /// The kernel's step id.
    pub(crate) id: String,
    /// The execution's effects lock while this step holds it (only with resources registered),
    /// so a body that waits on a subagent can let other calls run meanwhile.
    pub(crate) exclusive: std::sync::Mutex<Option<super::Exclusive>>,
}

thread_local! {
    static CURRENT: RefCell<Option<Ambient>> = const { RefCell::new(None) };
}

/// The context of the execution whose handler is being polled on this thread.
pub(crate) fn current() -> Option<ExecutionContext> {
    CURRENT.with(|slot| slot.borrow().as_ref().map(|a| a.context.clone()))
}

/// The step whose body is being polled on this thread, with its execution.
pub(crate) fn current_step() -> Option<(ExecutionContext, Arc<StepScope>)> {
    CURRENT.with(|slot| {
        let slot = slot.borrow();
        let ambient = slot.as_ref()?;
        Some((ambient.context.clone(), Arc::clone(ambient.step.as_ref()?)))
    })
}

pin_project! {
    /// A future that runs with an execution context current. Made by
    /// [`ExecutionContext::scope`].
    #[derive(Debug)]
    #[must_use = "futures do nothing unless polled"]
    pub struct Scoped<F> {
        ambient: Ambient,
        #[pin]
        future: F,
    }
}

impl<F> Scoped<F> {
    pub(crate) fn new(context: ExecutionContext, future: F) -> Self {
        Self {
            ambient: Ambient {
                context,
                step: None,
            },
            future,
        }
    }

    /// Scopes a step body: its step is current too.
    pub(crate) fn in_step(context: ExecutionContext, step: Arc<StepScope>, future: F) -> Self {
        Self {
            ambient: Ambient {
                context,
                step: Some(step),
            },
            future,
        }
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _restore = Swap::enter(this.ambient.clone());
        this.future.poll(cx)
    }
}

/// Puts an ambient in the slot and restores the previous one on drop.
struct Swap(Option<Ambient>);

impl Swap {
    fn enter(ambient: Ambient) -> Self {
        Self(CURRENT.with(|slot| slot.replace(Some(ambient))))
    }
}

impl Drop for Swap {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|slot| *slot.borrow_mut() = previous);
    }
}
