//! The dispatch lease a webhook hands to the agent.

use std::time::Duration;

/// The longest gap between two heartbeats.
const MAX_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(30);

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
}
