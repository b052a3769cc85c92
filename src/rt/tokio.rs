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
        self.tracker.spawn(task.in_current_span());
    }
}

impl Sleep for TokioRuntime {
    fn sleep(&self, duration: Duration) -> Delay {
        Delay::new(tokio::time::sleep(duration))
    }
}
