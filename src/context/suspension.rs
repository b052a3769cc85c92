//! Why the run is suspending: the control flow the kernel signalled, kept for code that runs
//! after a framework swallowed the error that carried it.

use super::{ExecutionContext, lock};
use crate::error::{Error, ErrorKind};

/// Why the current run is suspending: the kernel signalled control flow that ends this
/// dispatch without completing or failing the execution.
///
/// The SDK remembers it whichever way the error then travels. A framework that catches a
/// tool's [`ErrorKind::Blocked`] (or a provider SDK that turns a refused LLM call into its own
/// error) cannot hide it: when the handler returns, even `Ok`, the dispatch ends as the
/// suspension says, and the value the handler returned is not recorded. Until then,
/// [`ExecutionContext::suspension`] tells code after the framework that the run is going away
/// (to pause a sandbox, close a browser, flush a buffer) and why.
///
/// The variants are the four control-flow kinds of [`ErrorKind`], under the same names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Suspension {
    /// The execution waits: an approval is pending, or it waits on its subagents. The kernel
    /// delivers it again when it can go on, and the run replays its recorded steps.
    Blocked,
    /// The host's deadline (or the execution's `deadline_at`) is near, so no new step starts:
    /// the kernel delivers the execution again (or, past its own deadline, cancels it).
    DeadlineReached,
    /// The execution already ended elsewhere: completed, failed or cancelled. Nothing will
    /// resume it.
    Terminated,
    /// A newer delivery of this execution took over; this run can no longer write anything.
    LeaseSuperseded,
}

impl Suspension {
    /// The suspension an error of `kind` signals, if it is control flow.
    pub(crate) fn of(kind: ErrorKind) -> Option<Self> {
        match kind {
            ErrorKind::Blocked => Some(Self::Blocked),
            ErrorKind::DeadlineReached => Some(Self::DeadlineReached),
            ErrorKind::Terminated => Some(Self::Terminated),
            ErrorKind::LeaseSuperseded => Some(Self::LeaseSuperseded),
            _ => None,
        }
    }

    /// The [`ErrorKind`] of the control-flow error this suspension stands for.
    pub fn kind(self) -> ErrorKind {
        match self {
            Self::Blocked => ErrorKind::Blocked,
            Self::DeadlineReached => ErrorKind::DeadlineReached,
            Self::Terminated => ErrorKind::Terminated,
            Self::LeaseSuperseded => ErrorKind::LeaseSuperseded,
        }
    }

    /// The error that ends the dispatch.
    pub(crate) fn error(self) -> Error {
        match self {
            Self::Blocked => Error::blocked(),
            Self::DeadlineReached => Error::deadline_reached(),
            Self::Terminated => Error::terminated(),
            Self::LeaseSuperseded => Error::superseded(),
        }
    }

    /// How final it is: a later, more final signal replaces an earlier one (an execution
    /// cancelled while its run was blocked is terminated; a superseded run may write nothing).
    fn rank(self) -> u8 {
        match self {
            Self::Blocked => 0,
            Self::DeadlineReached => 1,
            Self::Terminated => 2,
            Self::LeaseSuperseded => 3,
        }
    }
}

impl ExecutionContext {
    /// Whether this run is suspending, and why: `Some` once the kernel signalled control flow
    /// (a step blocked on an approval or on subagents, an execution that ended elsewhere, a
    /// newer delivery, a deadline near), even if the error that carried it was caught and
    /// dropped on the way. `None` while the run goes on.
    ///
    /// When the handler returns after that, the dispatch ends as the suspension says, whatever
    /// the handler returned: a blocked execution stays blocked and is delivered again later, its
    /// recorded steps replayed. Check it after a framework that swallows errors, to release
    /// what the run holds:
    ///
    /// ```no_run
    /// # struct Sandbox;
    /// # impl Sandbox { async fn pause(&self) {} async fn destroy(&self) {} }
    /// # async fn framework_run(_: &str) -> String { String::new() }
    /// use rebuno::Suspension;
    ///
    /// async fn handler(task: String, sandbox: Sandbox) -> Result<String, rebuno::HandlerError> {
    ///     // A framework that calls tools and turns their errors into text for the model.
    ///     let answer = framework_run(&task).await;
    ///     match rebuno::execution()?.suspension() {
    ///         // Waiting for an approval: the next delivery replays up to here and goes on.
    ///         Some(Suspension::Blocked | Suspension::DeadlineReached) => sandbox.pause().await,
    ///         // Ended elsewhere: nothing will come back for the sandbox.
    ///         Some(Suspension::Terminated) => sandbox.destroy().await,
    ///         // Going on; or another delivery runs this execution now: leave it alone.
    ///         _ => {}
    ///     }
    ///     // Not recorded when the run is suspending: the dispatch ends as it says.
    ///     Ok(answer)
    /// }
    /// ```
    pub fn suspension(&self) -> Option<Suspension> {
        *lock(&self.inner.control)
    }

    /// Keeps `signalled` unless a more final suspension is kept already.
    pub(super) fn suspend_with(&self, signalled: Suspension) {
        let mut kept = lock(&self.inner.control);
        *kept = Some(after(*kept, signalled));
    }
}

/// The suspension to keep when `signalled` arrives while `kept` is kept: the more final one.
fn after(kept: Option<Suspension>, signalled: Suspension) -> Suspension {
    match kept {
        Some(kept) if kept.rank() >= signalled.rank() => kept,
        _ => signalled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_control_flow_kind_is_a_suspension_of_the_same_name() {
        for suspension in [
            Suspension::Blocked,
            Suspension::DeadlineReached,
            Suspension::Terminated,
            Suspension::LeaseSuperseded,
        ] {
            assert_eq!(Suspension::of(suspension.kind()), Some(suspension));
            assert_eq!(suspension.error().kind(), suspension.kind());
            assert!(suspension.error().is_control_flow());
            assert_eq!(
                format!("{:?}", suspension.kind()),
                format!("{suspension:?}")
            );
        }
        for kind in [ErrorKind::Tool, ErrorKind::Policy, ErrorKind::Network] {
            assert_eq!(Suspension::of(kind), None);
        }
    }

    #[test]
    fn a_more_final_suspension_replaces_an_earlier_one_and_never_the_reverse() {
        use Suspension::{Blocked, DeadlineReached, LeaseSuperseded, Terminated};
        assert_eq!(after(None, Blocked), Blocked);
        assert_eq!(
            after(Some(Blocked), Terminated),
            Terminated,
            "cancelled while blocked"
        );
        assert_eq!(after(Some(Blocked), DeadlineReached), DeadlineReached);
        assert_eq!(after(Some(Terminated), LeaseSuperseded), LeaseSuperseded);
        assert_eq!(after(Some(Terminated), Blocked), Terminated);
        assert_eq!(after(Some(LeaseSuperseded), Terminated), LeaseSuperseded);
        assert_eq!(after(Some(DeadlineReached), Blocked), DeadlineReached);
        assert_eq!(after(Some(Blocked), Blocked), Blocked);
    }
}
