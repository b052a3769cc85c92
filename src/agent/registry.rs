//! Which dispatch of each execution this agent is running, so re-deliveries neither race nor
//! repeat.
//!
//! Besides the runs in flight it remembers the last finished attempt of recently run
//! executions, so an attempt delivered twice to this process (a load balancer retrying, a
//! duplicated delivery arriving after the first run ended) never runs twice here. Across
//! processes nothing can tell: see "Running more than one replica" in the crate docs.

use std::collections::{HashMap, VecDeque};
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

/// How many finished executions' last attempts are remembered.
const FINISHED_CAPACITY: usize = 4096;

#[derive(Debug, Default)]
struct State {
    running: HashMap<String, Running>,
    finished: Finished,
    next_serial: u64,
    idle: Vec<oneshot::Sender<()>>,
}

/// The last finished attempt of each of the most recently finished executions, oldest first
/// out.
#[derive(Debug, Default)]
struct Finished {
    last: HashMap<String, (String, u64)>,
    order: VecDeque<String>,
}

impl Finished {
    /// Whether `lease` is an attempt of `execution_id` that already ran here, or an older one.
    fn covers(&self, execution_id: &str, lease: &Lease) -> bool {
        self.last
            .get(execution_id)
            .is_some_and(|(dispatch, attempt)| {
                *dispatch == lease.dispatch_id && lease.attempt <= *attempt
            })
    }

    fn remember(&mut self, execution_id: &str, dispatch_id: String, attempt: u64) {
        if self
            .last
            .insert(execution_id.to_owned(), (dispatch_id, attempt))
            .is_none()
        {
            self.order.push_back(execution_id.to_owned());
        }
        while self.order.len() > FINISHED_CAPACITY {
            if let Some(oldest) = self.order.pop_front() {
                self.last.remove(&oldest);
            }
        }
    }
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
        } else if state.finished.covers(execution_id, lease) {
            tracing::info!(
                execution_id,
                attempt = lease.attempt,
                "attempt already ran in this process; acknowledging without running it again"
            );
            return Admission::Duplicate;
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

    /// Forgets a finished (or dropped) run, unless a newer one already replaced it, and
    /// remembers its attempt so a repeat of it is not run again.
    pub(crate) fn finish(&self, execution_id: &str, serial: u64) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state
            .running
            .get(execution_id)
            .is_some_and(|r| r.serial == serial)
            && let Some(done) = state.running.remove(execution_id)
        {
            state
                .finished
                .remember(execution_id, done.dispatch_id, done.attempt);
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

    #[test]
    fn a_finished_attempt_is_not_run_again_but_a_newer_one_is() {
        let registry = Registry::default();
        let Admission::Run(first) = registry.admit("e", &lease("d", 1)) else {
            panic!("first run")
        };
        registry.finish("e", first.serial);
        assert!(matches!(
            registry.admit("e", &lease("d", 1)),
            Admission::Duplicate
        ));
        assert!(matches!(
            registry.admit("e", &lease("d", 2)),
            Admission::Run(_)
        ));
        assert!(matches!(
            registry.admit("other", &lease("d", 1)),
            Admission::Run(_)
        ));
    }

    #[test]
    fn finished_attempts_are_remembered_for_a_bounded_number_of_executions() {
        let registry = Registry::default();
        for n in 0..=FINISHED_CAPACITY {
            let id = format!("e{n}");
            let Admission::Run(ticket) = registry.admit(&id, &lease("d", 1)) else {
                panic!("run {n}")
            };
            registry.finish(&id, ticket.serial);
        }
        let state = registry.state.lock().unwrap();
        assert_eq!(state.finished.last.len(), FINISHED_CAPACITY);
        assert_eq!(state.finished.order.len(), FINISHED_CAPACITY);
        assert!(
            !state.finished.last.contains_key("e0"),
            "the oldest is forgotten"
        );
    }
}
