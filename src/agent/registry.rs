//! Which dispatch of each execution this agent is running, so re-deliveries neither race nor
//! repeat.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use futures_channel::oneshot;
use futures_util::future::{AbortHandle, AbortRegistration};

use crate::kernel::Lease;

/// What to do with an incoming dispatch.
#[derive(Debug)]
pub(crate) enum Admission {
    /// The same attempt, or an older one, is already running: acknowledge and do nothing.
    Duplicate,
    /// Run it. Any older run of the execution has been told to stop.
    Run(Ticket),
}

/// The right to run one dispatch; hand it back with [`Registry::finish`].
#[derive(Debug)]
pub(crate) struct Ticket {
    pub(crate) execution_id: String,
    pub(crate) serial: u64,
    pub(crate) abort: AbortRegistration,
}

#[derive(Debug)]
struct Running {
    dispatch_id: String,
    attempt: u64,
    serial: u64,
    abort: AbortHandle,
}

/// The runs in flight, by execution id.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    running: HashMap<String, Running>,
    next_serial: u64,
    idle: Vec<oneshot::Sender<()>>,
}

impl Registry {
    /// Decides whether `lease` for `execution_id` should run, superseding an older run.
    pub(crate) fn admit(&self, execution_id: &str, lease: &Lease) -> Admission {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(running) = state.running.get(execution_id) {
            if running.dispatch_id == lease.dispatch_id && lease.attempt <= running.attempt {
                return Admission::Duplicate;
            }
            tracing::info!(
                execution_id,
                superseded_attempt = running.attempt,
                "superseding the running dispatch"
            );
            running.abort.abort();
        }
        state.next_serial += 1;
        let serial = state.next_serial;
        let (abort, registration) = AbortHandle::new_pair();
        let running = Running {
            dispatch_id: lease.dispatch_id.clone(),
            attempt: lease.attempt,
            serial,
            abort,
        };
        state.running.insert(execution_id.to_owned(), running);
        Admission::Run(Ticket {
            execution_id: execution_id.to_owned(),
            serial,
            abort: registration,
        })
    }

    /// Forgets a finished run, unless a newer one already replaced it.
    pub(crate) fn finish(&self, execution_id: &str, serial: u64) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state
            .running
            .get(execution_id)
            .is_some_and(|r| r.serial == serial)
        {
            state.running.remove(execution_id);
        }
        if state.running.is_empty() {
            for waiter in state.idle.drain(..) {
                let _ = waiter.send(());
            }
        }
    }

    /// Resolves once no run is in flight.
    pub(crate) async fn idle(&self) {
        let receiver = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.running.is_empty() {
                return;
            }
            let (sender, receiver) = oneshot::channel();
            state.idle.push(sender);
            receiver
        };
        let _ = receiver.await;
    }

    /// How many runs are in flight.
    pub(crate) fn len(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .running
            .len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn lease(dispatch: &str, attempt: u64) -> Lease {
        Lease {
            dispatch_id: dispatch.into(),
            attempt,
            timeout: Duration::from_secs(120),
        }
    }

    #[test]
    fn repeats_and_older_attempts_are_duplicates() {
        let registry = Registry::default();
        assert!(matches!(
            registry.admit("e", &lease("d", 2)),
            Admission::Run(_)
        ));
        assert!(matches!(
            registry.admit("e", &lease("d", 2)),
            Admission::Duplicate
        ));
        assert!(matches!(
            registry.admit("e", &lease("d", 1)),
            Admission::Duplicate
        ));
    }

    #[test]
    fn a_newer_attempt_aborts_the_running_one() {
        let registry = Registry::default();
        let Admission::Run(first) = registry.admit("e", &lease("d", 1)) else {
            panic!("first run")
        };
        let Admission::Run(second) = registry.admit("e", &lease("d", 2)) else {
            panic!("second run")
        };
        let aborted =
            futures_util::future::Abortable::new(std::future::pending::<()>(), first.abort);
        assert!(aborted.is_aborted());
        registry.finish("e", first.serial);
        assert_eq!(registry.len(), 1, "a stale finish keeps the newer run");
        registry.finish("e", second.serial);
        assert_eq!(registry.len(), 0);
    }

    #[test]
    fn a_new_dispatch_supersedes_even_with_a_lower_attempt() {
        let registry = Registry::default();
        let _first = registry.admit("e", &lease("d1", 3));
        assert!(matches!(
            registry.admit("e", &lease("d2", 1)),
            Admission::Run(_)
        ));
    }
}
