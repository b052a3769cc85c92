//! The dispatch lease a webhook hands to the agent.

use std::time::Duration;

use super::exchange::Pace;
use super::retry::RetryPolicy;

/// The longest gap between two heartbeats.
const MAX_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(30);
/// The first wait before a failed heartbeat is sent again.
const FIRST_RENEWAL_RETRY: Duration = Duration::from_millis(100);

/// The delivery attempt a webhook arrived under. Every mutation sends it back, so the kernel
/// refuses a handler whose dispatch was reclaimed and re-delivered.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Lease {
    /// The dispatch id.
    pub(crate) dispatch_id: String,
    /// The delivery attempt, from 1.
    pub(crate) attempt: u64,
    /// The lease period.
    pub(crate) timeout: Duration,
}

impl Lease {
    /// How often to renew: a third of the lease, at most every 30 s.
    pub(crate) fn heartbeat_interval(&self) -> Duration {
        (self.timeout / 3).min(MAX_HEARTBEAT_INTERVAL)
    }

    /// How a heartbeat is retried: from 100 ms, never more than a third of the heartbeat
    /// interval apart, until the lease would have run out; each try takes at most the interval
    /// (or `timeout`, when shorter). The kernel's general backoff (waits of 2, 4 and 8 s) would
    /// outlast a short lease: after a kernel restart of two seconds, a 3 s lease ran out while
    /// the run waited to try again.
    pub(crate) fn renewal(&self, timeout: Duration) -> Pace {
        let interval = self.heartbeat_interval();
        let first_delay = FIRST_RENEWAL_RETRY.min(interval);
        let mut retry = RetryPolicy {
            attempts: 1,
            first_delay,
            max_delay: (interval / 3).max(first_delay),
        };
        let mut waited = Duration::ZERO;
        while waited < self.timeout && retry.attempts < u32::from(u16::MAX) {
            waited += retry.delay(retry.attempts);
            retry.attempts += 1;
        }
        Pace {
            retry,
            timeout: timeout.min(interval.max(first_delay)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_is_a_third_of_the_lease_capped_at_thirty_seconds() {
        let lease = |secs| Lease {
            dispatch_id: "d".into(),
            attempt: 1,
            timeout: Duration::from_secs(secs),
        };
        assert_eq!(lease(120).heartbeat_interval(), Duration::from_secs(30));
        assert_eq!(lease(30).heartbeat_interval(), Duration::from_secs(10));
    }

    #[test]
    fn a_renewal_retries_often_enough_to_reach_a_kernel_back_before_the_lease_runs_out() {
        let lease = Lease {
            dispatch_id: "d".into(),
            attempt: 1,
            timeout: Duration::from_secs(3),
        };
        let pace = lease.renewal(Duration::from_secs(30));
        let waits: Vec<_> = (1..pace.retry.attempts)
            .map(|n| pace.retry.delay(n).as_millis())
            .collect();
        assert_eq!(waits[..4], [100, 200, 333, 333]);
        assert!(waits.iter().all(|w| *w <= 333), "{waits:?}");
        let total: u128 = waits.iter().sum();
        assert!((3_000..3_400).contains(&total), "retries for {total} ms");
        assert_eq!(pace.timeout, Duration::from_secs(1));
        assert_eq!(
            lease
                .renewal(Duration::from_millis(500))
                .timeout
                .as_millis(),
            500
        );
    }
}
