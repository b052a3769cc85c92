//! Retry delays: exponential backoff with jitter (deliveries, rate-limit parking).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// `min(base * 2^(attempt-1), cap) + uniform(0, 25%)`.
pub(crate) fn backoff(base: Duration, cap: Duration, attempt: u32) -> Duration {
    let exp = attempt.saturating_sub(1).min(20);
    jittered(base.saturating_mul(1u32 << exp).min(cap))
}

/// `delay + uniform(0, 25%)`.
pub(crate) fn jittered(delay: Duration) -> Duration {
    let jitter = RandomState::new().build_hasher().finish() % 1000;
    delay + delay.mul_f64(0.25 * jitter as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let base = Duration::from_secs(1);
        let cap = Duration::from_secs(30);
        for (attempt, floor) in [(1, 1), (2, 2), (3, 4), (6, 30), (9, 30)] {
            let delay = backoff(base, cap, attempt);
            let floor = Duration::from_secs(floor);
            assert!(
                delay >= floor && delay <= floor.mul_f64(1.25),
                "{attempt}: {delay:?}"
            );
        }
    }
}
