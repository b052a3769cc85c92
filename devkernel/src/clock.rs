//! The kernel's clock: every time the kernel reads (leases, delivery backoff, approval
//! expiry, rate-limit refill, event timestamps) comes from here, so a test can drive it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::model::Timestamp;

/// How far a manual clock can be advanced in all (a thousand years), so instants never overflow.
const LONGEST: Duration = Duration::from_secs(1000 * 365 * 24 * 3600);

/// Real time, or a manual clock that only moves when told to.
#[derive(Debug, Clone, Default)]
pub(crate) enum Clock {
    /// The Tokio clock and the system's wall clock.
    #[default]
    System,
    /// Frozen at its creation until [`Clock::advance`].
    Manual(Arc<Manual>),
}

/// A manual clock's origin and how far it has been advanced.
#[derive(Debug)]
pub(crate) struct Manual {
    origin: Instant,
    wall: Timestamp,
    advanced: watch::Sender<Duration>,
}

impl Clock {
    /// A manual clock starting at the current real time.
    pub(crate) fn manual() -> Self {
        Self::Manual(Arc::new(Manual {
            origin: Instant::now(),
            wall: Timestamp::now(),
            advanced: watch::channel(Duration::ZERO).0,
        }))
    }

    /// The monotonic now (leases, backoff, rate limits).
    pub(crate) fn now(&self) -> Instant {
        match self {
            Self::System => Instant::now(),
            Self::Manual(manual) => manual.origin + *manual.advanced.borrow(),
        }
    }

    /// The wall-clock now (event times, approval deadlines).
    pub(crate) fn timestamp(&self) -> Timestamp {
        match self {
            Self::System => Timestamp::now(),
            Self::Manual(manual) => manual.wall.plus(*manual.advanced.borrow()),
        }
    }

    /// Moves a manual clock forward (a system clock ignores it). Returns whether it moved.
    pub(crate) fn advance(&self, by: Duration) -> bool {
        match self {
            Self::System => false,
            Self::Manual(manual) => {
                manual
                    .advanced
                    .send_modify(|advanced| *advanced = advanced.saturating_add(by).min(LONGEST));
                true
            }
        }
    }

    /// Sleeps until `at` on this clock.
    pub(crate) async fn sleep_until(&self, at: Instant) {
        match self {
            Self::System => tokio::time::sleep_until(at).await,
            Self::Manual(manual) => {
                let mut advanced = manual.advanced.subscribe();
                while self.now() < at {
                    if advanced.changed().await.is_err() {
                        return std::future::pending().await;
                    }
                }
            }
        }
    }

    /// Resolves when a manual clock moves; never for the system clock.
    pub(crate) async fn moved(&self) {
        match self {
            Self::System => std::future::pending().await,
            Self::Manual(manual) => {
                let mut advanced = manual.advanced.subscribe();
                if advanced.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        }
    }
}

/// The SDK's sleeps on a kernel clock: an agent under test waits (heartbeats, retries) in the
/// same time the kernel keeps, so a manual clock drives both.
#[derive(Debug, Clone)]
pub(crate) struct KernelSleep(pub(crate) Clock);

impl rebuno::rt::Sleep for KernelSleep {
    fn sleep(&self, duration: Duration) -> rebuno::rt::Delay {
        let clock = self.0.clone();
        let at = clock.now() + duration.min(LONGEST);
        rebuno::rt::Delay::new(async move { clock.sleep_until(at).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_manual_clock_moves_only_when_advanced() {
        let clock = Clock::manual();
        let (start, wall) = (clock.now(), clock.timestamp());
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(clock.now(), start);
        assert!(clock.advance(Duration::from_secs(3600)));
        assert_eq!(clock.now(), start + Duration::from_secs(3600));
        assert_eq!(
            clock.timestamp().unix_nanos() - wall.unix_nanos(),
            3_600_000_000_000
        );
    }

    #[tokio::test]
    async fn a_sleeper_wakes_when_the_clock_passes_its_deadline() {
        let clock = Clock::manual();
        let deadline = clock.now() + Duration::from_secs(60);
        let sleeper = tokio::spawn({
            let clock = clock.clone();
            async move { clock.sleep_until(deadline).await }
        });
        clock.advance(Duration::from_secs(30));
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished());
        clock.advance(Duration::from_secs(30));
        tokio::time::timeout(Duration::from_secs(5), sleeper)
            .await
            .expect("woke")
            .expect("joined");
    }
}
