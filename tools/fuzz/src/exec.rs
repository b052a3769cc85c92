//! A tiny executor and the fake runtime capabilities the cases run on: no Tokio, no threads,
//! no real time. Every case ends or is reported as a hang.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use rebuno::rt::{Clock, Delay, Runtime, Sleep, Spawn, Task};

/// Polls `future` until it is ready, with a no-op waker (every future here either makes
/// progress when polled or yields for a bounded number of polls).
///
/// # Panics
///
/// When the future is still pending after `max_polls` polls: the case hangs.
pub(crate) fn drive<F: Future>(future: F, max_polls: u64) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..max_polls {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
    }
    panic!("HANG: the future is still pending after {max_polls} polls");
}

/// A spawner that drops (cancels) what it is given: cases drive their tasks themselves.
#[derive(Debug)]
pub(crate) struct DropSpawn;

impl Spawn for DropSpawn {
    fn spawn(&self, task: Task) {
        drop(task);
    }
}

/// Virtual time: starts at a fixed instant, advanced by every completed sleep.
#[derive(Debug, Clone)]
pub(crate) struct VirtualClock(Arc<AtomicU64>);

/// 2023-11-14T22:13:20Z, a fixed start so timestamps are reproducible.
pub(crate) const EPOCH_MILLIS: u64 = 1_700_000_000_000;

impl VirtualClock {
    pub(crate) fn new() -> Self {
        Self(Arc::new(AtomicU64::new(EPOCH_MILLIS)))
    }

    pub(crate) fn advance(&self, by: Duration) {
        let millis = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                Some(now.saturating_add(millis))
            });
    }
}

impl Clock for VirtualClock {
    fn unix_millis(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Sleeps that take a few polls instead of real time (1 poll, plus one per second asked,
/// at most 4), then advance the virtual clock by the duration asked.
#[derive(Debug, Clone)]
pub(crate) struct YieldSleep(pub(crate) VirtualClock);

impl Sleep for YieldSleep {
    fn sleep(&self, duration: Duration) -> Delay {
        let polls = 1 + duration.as_secs().min(3);
        Delay::new(YieldFor {
            left: polls,
            clock: self.0.clone(),
            duration,
        })
    }
}

struct YieldFor {
    left: u64,
    clock: VirtualClock,
    duration: Duration,
}

impl Future for YieldFor {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.left == 0 {
            self.clock.advance(self.duration);
            return Poll::Ready(());
        }
        self.left -= 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// A runtime on the fake capabilities, and its clock.
pub(crate) fn runtime() -> (Runtime, VirtualClock) {
    let clock = VirtualClock::new();
    (
        Runtime::new(DropSpawn, YieldSleep(clock.clone()), clock.clone()),
        clock,
    )
}
