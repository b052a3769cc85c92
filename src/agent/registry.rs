//! Which dispatch of each execution this agent is running, so re-deliveries neither race nor
//! repeat.
//!
//! Besides the runs in flight it remembers, for the most recently seen executions, every
//! dispatch this process admitted and its highest attempt. An attempt delivered again (a load
//! balancer retrying, a duplicate arriving late, a stale webhook of a dispatch the kernel
//! already retired) is acknowledged and never run twice here, and never stops the run of a
//! newer dispatch. Across processes nothing can tell: see "Running more than one replica" in
//! the crate docs.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use futures_channel::oneshot;
use futures_util::future::{AbortHandle, AbortRegistration};

use crate::kernel::Lease;

/// What to do with an incoming dispatch.
#[derive(Debug)]
pub(crate) enum Admission {
    /// This attempt, or a later one of its dispatch, already ran or runs here: acknowledge and
    /// do nothing.
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
    attempt: u64,
    serial: u64,
    abort: AbortHandle,
}

/// The runs in flight, by execution id.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    state: Mutex<State>,
}

/// How many executions' admitted dispatches are remembered.
const REMEMBERED_EXECUTIONS: usize = 4096;

/// How many dispatches are remembered per execution (each approval, subagent wait or
/// re-dispatch after a rate limit starts a new one).
const REMEMBERED_DISPATCHES: usize = 16;

#[derive(Debug, Default)]
struct State {
    running: HashMap<String, Running>,
    admitted: Admitted,
    next_serial: u64,
    idle: Vec<oneshot::Sender<()>>,
}

/// Per execution, the dispatches admitted here with their highest attempt, oldest first; the
/// least recently admitted executions are forgotten first.
#[derive(Debug, Default)]
struct Admitted {
    dispatches: HashMap<String, VecDeque<(String, u64)>>,
    order: VecDeque<String>,
}

impl Admitted {
    /// Whether `lease` is an attempt of `execution_id` this process already admitted, or an
    /// older attempt of a dispatch it admitted.
    fn covers(&self, execution_id: &str, lease: &Lease) -> bool {
        self.dispatches.get(execution_id).is_some_and(|seen| {
            seen.iter().any(|(dispatch, attempt)| {
                *dispatch == lease.dispatch_id && lease.attempt <= *attempt
            })
        })
    }

    /// Records `lease` as admitted for `execution_id`.
    fn record(&mut self, execution_id: &str, lease: &Lease) {
        let seen = match self.dispatches.get_mut(execution_id) {
            Some(seen) => seen,
            None => {
                self.order.push_back(execution_id.to_owned());
                self.forget_oldest();
                self.dispatches.entry(execution_id.to_owned()).or_default()
            }
        };
        match seen
            .iter_mut()
            .find(|(dispatch, _)| *dispatch == lease.dispatch_id)
        {
            Some((_, attempt)) => *attempt = (*attempt).max(lease.attempt),
            None => {
                seen.push_back((lease.dispatch_id.clone(), lease.attempt));
                if seen.len() > REMEMBERED_DISPATCHES {
                    seen.pop_front();
                }
            }
        }
    }

    fn forget_oldest(&mut self) {
        while self.order.len() > REMEMBERED_EXECUTIONS {
            if let Some(oldest) = self.order.pop_front() {
                self.dispatches.remove(&oldest);
            }
        }
    }
}

impl Registry {
    /// Decides whether `lease` for `execution_id` should run, superseding an older run.
    ///
    /// An attempt already admitted here (running or finished), or older than one admitted, is
    /// a duplicate. Anything else is newer than what runs: a later attempt of the running
    /// dispatch, or a dispatch this process has not seen (the kernel starts a new one after a
    /// block ends), so it supersedes the running one.
    pub(crate) fn admit(&self, execution_id: &str, lease: &Lease) -> Admission {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.admitted.covers(execution_id, lease) {
            tracing::info!(
                execution_id,
                attempt = lease.attempt,
                "attempt already admitted in this process; acknowledging without running it"
            );
            return Admission::Duplicate;
        }
        state.admitted.record(execution_id, lease);
        if let Some(running) = state.running.get(execution_id) {
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

    /// Forgets a finished (or dropped) run, unless a newer one already replaced it. Its attempt
    /// stays admitted, so a repeat of it is not run again.
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
    fn a_stale_dispatch_never_stops_a_newer_one_nor_lets_it_run_twice() {
        let registry = Registry::default();
        let Admission::Run(first) = registry.admit("e", &lease("d1", 1)) else {
            panic!("d1 runs")
        };
        registry.finish("e", first.serial);
        let Admission::Run(_second) = registry.admit("e", &lease("d2", 1)) else {
            panic!("d2, the dispatch after a block, runs")
        };
        assert!(
            matches!(registry.admit("e", &lease("d1", 1)), Admission::Duplicate),
            "a stale webhook of d1 is ignored"
        );
        assert_eq!(registry.len(), 1, "d2 still runs");
        assert!(matches!(
            registry.admit("e", &lease("d2", 1)),
            Admission::Duplicate
        ));
    }

    #[test]
    fn admitted_attempts_are_remembered_for_a_bounded_number_of_executions() {
        let registry = Registry::default();
        for n in 0..=REMEMBERED_EXECUTIONS {
            let id = format!("e{n}");
            let Admission::Run(ticket) = registry.admit(&id, &lease("d", 1)) else {
                panic!("run {n}")
            };
            registry.finish(&id, ticket.serial);
        }
        let state = registry.state.lock().unwrap();
        assert_eq!(state.admitted.dispatches.len(), REMEMBERED_EXECUTIONS);
        assert_eq!(state.admitted.order.len(), REMEMBERED_EXECUTIONS);
        assert!(
            !state.admitted.dispatches.contains_key("e0"),
            "the oldest is forgotten"
        );
        drop(state);
        for n in 0..=REMEMBERED_DISPATCHES {
            let _ = registry.admit("many", &lease(&format!("d{n}"), 1));
        }
        let state = registry.state.lock().unwrap();
        assert_eq!(
            state.admitted.dispatches["many"].len(),
            REMEMBERED_DISPATCHES
        );
    }
}
