//! Pairs the runtime's work on an invocation with the extension's INVOKE event, by request id.
//!
//! Lambda freezes the sandbox once the runtime *and* every INVOKE-subscribed extension have
//! asked for the next event. The runtime side takes a [`Hold`] on the invocation's request id
//! (the runtime layer for as long as the runtime processes it, the handler for as long as the
//! acknowledged run lasts); the extension side [`wait`](Holds::wait)s for that request id until
//! every hold is released. Either side may come first, and nothing depends on the order of
//! invocations: an emulator that drops or reorders extension events cannot pair the wrong ones.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::mpsc;

/// Request id → the holds on that invocation. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub(crate) struct Holds {
    slots: Arc<Mutex<HashMap<String, Slot>>>,
}

/// Keeps one invocation's sandbox unfrozen while alive.
#[derive(Debug)]
pub(crate) struct Hold {
    _sender: mpsc::Sender<()>,
}

/// One invocation. Its channel closes when every strong sender (the seed, then the holds) is
/// gone; nothing is ever sent on it.
#[derive(Debug)]
struct Slot {
    /// Stands for the runtime until it takes its first hold, so an extension that sees the
    /// INVOKE event first waits for the runtime to start.
    seed: Option<mpsc::Sender<()>>,
    /// Lets later holds join while at least one hold is alive.
    weak: mpsc::WeakSender<()>,
    /// Taken by the extension's waiter.
    closed: Option<mpsc::Receiver<()>>,
}

impl Slot {
    fn new() -> Self {
        let (seed, closed) = mpsc::channel(1);
        Self {
            weak: seed.downgrade(),
            seed: Some(seed),
            closed: Some(closed),
        }
    }

    fn take_hold(&mut self) -> Option<Hold> {
        let sender = self.seed.take().or_else(|| self.weak.upgrade())?;
        Some(Hold { _sender: sender })
    }

    /// The runtime is done with it but no extension ever asked: an emulator dropped the event.
    fn is_orphaned(&self) -> bool {
        self.seed.is_none() && self.weak.strong_count() == 0 && self.closed.is_some()
    }
}

impl Holds {
    /// Takes a hold on `request_id`, creating its slot if the extension has not seen it yet.
    ///
    /// `None` when every earlier hold on it is already released: the invocation is over and
    /// the extension may already have let the sandbox freeze.
    pub(crate) fn hold(&self, request_id: &str) -> Option<Hold> {
        let mut slots = self.lock();
        if !slots.contains_key(request_id) {
            slots.retain(|_, slot| !slot.is_orphaned());
        }
        slots
            .entry(request_id.to_owned())
            .or_insert_with(Slot::new)
            .take_hold()
    }

    /// Resolves once the runtime has started on `request_id` and released every hold on it.
    pub(crate) async fn wait(&self, request_id: &str) {
        let closed = self
            .lock()
            .entry(request_id.to_owned())
            .or_insert_with(Slot::new)
            .closed
            .take();
        if let Some(mut closed) = closed {
            while closed.recv().await.is_some() {}
        }
        self.lock().remove(request_id);
    }

    /// Stops tracking `request_id` (its waiter gave up).
    pub(crate) fn forget(&self, request_id: &str) {
        self.lock().remove(request_id);
    }

    /// How many invocations are tracked (for tests and debug logs).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn resolves(holds: &Holds, id: &str) -> bool {
        tokio::time::timeout(Duration::from_millis(50), holds.wait(id))
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn runtime_first_then_extension_waits_for_every_hold() {
        let holds = Holds::default();
        let layer = holds.hold("a").unwrap();
        let run = holds.hold("a").unwrap();
        drop(layer);
        let waiter = tokio::spawn({
            let holds = holds.clone();
            async move { holds.wait("a").await }
        });
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!waiter.is_finished(), "the run still holds the sandbox");
        drop(run);
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(holds.len(), 0);
    }

    #[tokio::test]
    async fn extension_first_waits_for_the_runtime_to_start() {
        let holds = Holds::default();
        let waiter = tokio::spawn({
            let holds = holds.clone();
            async move { holds.wait("b").await }
        });
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(
            !waiter.is_finished(),
            "no hold yet must not mean the work is done"
        );
        let hold = holds.hold("b").unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!waiter.is_finished());
        drop(hold);
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn pairs_by_request_id_not_by_order() {
        let holds = Holds::default();
        let first = holds.hold("1").unwrap();
        let second = holds.hold("2").unwrap();
        drop(second);
        assert!(resolves(&holds, "2").await);
        assert!(!resolves(&holds, "1").await, "1 is still held");
        drop(first);
        assert!(resolves(&holds, "1").await);
    }

    #[tokio::test]
    async fn no_hold_after_release_and_orphans_are_pruned() {
        let holds = Holds::default();
        drop(holds.hold("gone").unwrap());
        assert!(
            holds.hold("gone").is_none(),
            "a finished invocation stays finished"
        );
        let _next = holds.hold("next").unwrap();
        assert_eq!(holds.len(), 1, "the orphaned slot was pruned");
    }
}
