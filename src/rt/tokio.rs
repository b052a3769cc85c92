//! Spawning and sleeping on Tokio, with a tracker so hosts can drain background runs.

use std::time::Duration;

use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::{Delay, Sleep, Spawn, Task};

/// Spawns on the current Tokio runtime and tracks every task, so a server can wait for
/// acknowledged dispatches to finish before it exits ([`TokioRuntime::drain`]).
///
/// Cloning shares the tracker.
#[derive(Debug, Clone, Default)]
pub struct TokioRuntime {
    tracker: TaskTracker,
}

impl TokioRuntime {
    /// A runtime with an empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many spawned tasks are still running.
    pub fn in_flight(&self) -> usize {
        self.tracker.len()
    }

    /// Waits until every task spawned so far, and any spawned while waiting, has finished.
    pub async fn drain(&self) {
        self.tracker.close();
        self.tracker.wait().await;
        self.tracker.reopen();
    }
}

impl Spawn for TokioRuntime {
    #[allow(clippy::disallowed_methods)] // this is the Tokio spawner itself
    fn spawn(&self, task: Task) {
        // Outside a runtime (a value dropped on a thread of its own, after shutdown), Tokio
        // would panic, possibly inside a `Drop`: the task is dropped instead, and said so.
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                self.tracker.spawn_on(task.in_current_span(), &handle);
            }
            Err(_) => tracing::warn!("a task was spawned outside a Tokio runtime: dropped"),
        }
    }
}

impl Sleep for TokioRuntime {
    fn sleep(&self, duration: Duration) -> Delay {
        Delay::new(tokio::time::sleep(duration))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_spawned_outside_a_runtime_is_dropped_not_a_panic() {
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&ran);
        TokioRuntime::new().spawn(Task::new(async move {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        }));
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[tokio::test]
    async fn inside_a_runtime_the_task_runs_and_is_tracked() {
        let runtime = TokioRuntime::new();
        let (done, finished) = tokio::sync::oneshot::channel();
        runtime.spawn(Task::new(async move {
            let _ = done.send(());
        }));
        runtime.drain().await;
        assert!(finished.await.is_ok());
        assert_eq!(runtime.in_flight(), 0);
    }
}
