//! Runtime capabilities the core needs but never chooses: spawning, sleeping and the clock.
//!
//! The core builds for `wasm32-unknown-unknown` without Tokio, so every host hands these in:
//! the hyper and Lambda adapters use [`TokioRuntime`] (feature
//! `rt-tokio`), the Workers adapter uses `ctx.wait_until` and `worker::Delay`, and tests can use
//! their own.

mod maybe;
pub(crate) mod rfc3339;
#[cfg(all(feature = "rt-tokio", not(target_arch = "wasm32")))]
mod tokio;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

#[cfg(all(feature = "rt-tokio", not(target_arch = "wasm32")))]
pub use self::tokio::TokioRuntime;
pub use maybe::{BoxFuture, MaybeSend, MaybeSync};

/// Background work the host must keep alive until it completes: an acknowledged dispatch.
///
/// Dropping a `Task` cancels it.
#[must_use = "a Task does nothing unless it is spawned or awaited"]
pub struct Task(BoxFuture<'static, ()>);

impl Task {
    /// Wraps a future as a task.
    pub fn new(future: impl Future<Output = ()> + MaybeSend + 'static) -> Self {
        Self(Box::pin(future))
    }
}

#[cfg(test)]
impl Task {
    /// The size of the future this task holds (what a waiting task keeps in memory).
    pub(crate) fn future_size(&self) -> usize {
        std::mem::size_of_val(&*self.0)
    }
}

impl Future for Task {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl fmt::Debug for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Task")
    }
}

/// A delay produced by a [`Sleep`] implementation.
#[must_use = "a Delay does nothing unless awaited"]
pub struct Delay(BoxFuture<'static, ()>);

impl Delay {
    /// Wraps a future that resolves when the delay has passed.
    pub fn new(future: impl Future<Output = ()> + MaybeSend + 'static) -> Self {
        Self(Box::pin(future))
    }
}

impl Future for Delay {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl fmt::Debug for Delay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Delay")
    }
}

/// Runs detached work for as long as the host allows.
///
/// The handle is `Send + Sync` on every target (so it fits in `http::Extensions`); the task it
/// runs is only [`MaybeSend`].
pub trait Spawn: Send + Sync + fmt::Debug {
    /// Starts `task` in the background.
    fn spawn(&self, task: Task);
}

/// Produces delays. Implementations must not block the thread.
pub trait Sleep: Send + Sync + fmt::Debug {
    /// A future that resolves after `duration`.
    fn sleep(&self, duration: Duration) -> Delay;
}

/// Wall-clock time, for `Rebuno-Timestamp` and host deadlines.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn unix_millis(&self) -> u64;

    /// Whole seconds since the Unix epoch.
    fn unix_seconds(&self) -> u64 {
        self.unix_millis() / 1000
    }
}

/// The system clock: `std` on native targets, `Date.now()` on wasm32.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the one place the core reads the wall clock
    fn unix_millis(&self) -> u64 {
        web_time::SystemTime::now()
            .duration_since(web_time::UNIX_EPOCH)
            .map_or(0, |elapsed| {
                u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
            })
    }
}

/// The capabilities an [`Agent`](crate::Agent) runs on, cheap to clone.
///
/// ```
/// # #[cfg(all(feature = "rt-tokio", not(target_arch = "wasm32")))] {
/// let runtime = rebuno::rt::Runtime::tokio();
/// # let _ = runtime; }
/// ```
#[derive(Clone, Debug)]
pub struct Runtime {
    spawn: Arc<dyn Spawn>,
    sleep: Arc<dyn Sleep>,
    clock: Arc<dyn Clock>,
}

impl Runtime {
    /// Assembles a runtime from its three capabilities.
    pub fn new(
        spawn: impl Spawn + 'static,
        sleep: impl Sleep + 'static,
        clock: impl Clock + 'static,
    ) -> Self {
        Self {
            spawn: Arc::new(spawn),
            sleep: Arc::new(sleep),
            clock: Arc::new(clock),
        }
    }

    /// The Tokio runtime with the system clock.
    #[cfg(all(feature = "rt-tokio", not(target_arch = "wasm32")))]
    pub fn tokio() -> Self {
        let rt = TokioRuntime::new();
        Self::new(rt.clone(), rt, SystemClock)
    }

    /// The same runtime with another spawner (the adapters use this per request).
    pub fn with_spawn(&self, spawn: Arc<dyn Spawn>) -> Self {
        Self {
            spawn,
            ..self.clone()
        }
    }

    /// Starts `task` in the background.
    pub fn spawn(&self, task: Task) {
        self.spawn.spawn(task);
    }

    /// A future that resolves after `duration`.
    pub fn sleep(&self, duration: Duration) -> Delay {
        self.sleep.sleep(duration)
    }

    /// Seconds since the Unix epoch.
    pub fn unix_seconds(&self) -> u64 {
        self.clock.unix_seconds()
    }

    /// Milliseconds since the Unix epoch.
    pub fn unix_millis(&self) -> u64 {
        self.clock.unix_millis()
    }

    /// The spawner handle.
    pub fn spawner(&self) -> Arc<dyn Spawn> {
        Arc::clone(&self.spawn)
    }
}

/// A request extension: the wall-clock time at which the host will cut the background run
/// short (Lambda's invocation deadline, Workers' `waitUntil` limit).
///
/// Within `margin` of it the run starts no new step: the step in flight finishes and records
/// its outcome, then the dispatch ends without failing the execution, and the kernel
/// re-delivers it once the lease expires (register such agents with a short
/// `lease_timeout_seconds`, at least 10). The next dispatch replays what was recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline {
    unix_millis: u64,
    margin: Duration,
}

impl Deadline {
    /// The default margin: enough for one kernel round trip and a short step to finish.
    pub const DEFAULT_MARGIN: Duration = Duration::from_secs(5);

    /// A deadline at `unix_millis` with the default margin.
    pub fn at_unix_millis(unix_millis: u64) -> Self {
        Self {
            unix_millis,
            margin: Self::DEFAULT_MARGIN,
        }
    }

    /// Stop starting steps this long before the deadline.
    pub fn margin(mut self, margin: Duration) -> Self {
        self.margin = margin;
        self
    }

    /// Whether a new step started at `now_millis` could run past the margin.
    pub fn is_near(&self, now_millis: u64) -> bool {
        let margin = u64::try_from(self.margin.as_millis()).unwrap_or(u64::MAX);
        now_millis.saturating_add(margin) >= self.unix_millis
    }

    /// The deadline in Unix milliseconds.
    pub fn unix_millis(&self) -> u64 {
        self.unix_millis
    }

    /// The same margin before another deadline, at `unix_millis`.
    pub(crate) fn moved_to(self, unix_millis: u64) -> Self {
        Self {
            unix_millis,
            ..self
        }
    }
}

/// A request extension that tells [`Agent::fetch`](crate::Agent::fetch) where to run the
/// acknowledged dispatch. Host adapters insert it per request.
#[derive(Clone, Debug)]
pub struct Spawner(pub Arc<dyn Spawn>);

impl Spawner {
    /// Starts `task` in the background.
    pub fn spawn(&self, task: Task) {
        self.0.spawn(task);
    }
}
