//! Logging refused webhooks without flooding: a wrong secret refuses every delivery, and a
//! webhook URL on the internet gets probed, so each kind of refusal is logged at `warn` at once
//! and then at most once a minute, with how many were refused in between (at `debug`).

use std::sync::atomic::{AtomicU64, Ordering};

/// How often one kind of refusal is logged at `warn`, at most.
const EVERY_MS: u64 = 60_000;

/// When a kind of refusal was last logged at `warn`, and how many came since.
#[derive(Debug, Default)]
pub(super) struct Limiter {
    /// Unix milliseconds of the last `warn` line, plus one (0: never).
    logged: AtomicU64,
    quiet: AtomicU64,
}

impl Limiter {
    /// `Some(refused since the last warn line)` when this refusal, seen at `now_ms`, should be
    /// logged at `warn`; `None` when it should stay quiet.
    pub(super) fn admit(&self, now_ms: u64) -> Option<u64> {
        let last = self.logged.load(Ordering::Acquire);
        let due = last == 0 || now_ms.saturating_add(1) >= last.saturating_add(EVERY_MS);
        if due
            && self
                .logged
                .compare_exchange(
                    last,
                    now_ms.saturating_add(1),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
        {
            return Some(self.quiet.swap(0, Ordering::AcqRel));
        }
        self.quiet.fetch_add(1, Ordering::AcqRel);
        None
    }
}

/// The limiters of the refusals worth a user's attention.
#[derive(Debug, Default)]
pub(super) struct Refusals {
    /// `401`: a missing or wrong signature.
    pub(super) unsigned: Limiter,
    /// `400`: signed with the secret, but not a dispatch.
    pub(super) malformed: Limiter,
}

/// `" (N more refused since the last such line)"`, or nothing.
pub(super) fn since(quiet: u64) -> String {
    if quiet == 0 {
        String::new()
    } else {
        format!(" ({quiet} more refused since the last such line)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_is_logged_then_one_a_minute_with_the_count() {
        let limiter = Limiter::default();
        assert_eq!(limiter.admit(1_000), Some(0));
        assert_eq!(limiter.admit(1_001), None);
        assert_eq!(limiter.admit(30_000), None);
        assert_eq!(limiter.admit(60_999), None);
        assert_eq!(limiter.admit(61_000), Some(3));
        assert_eq!(limiter.admit(61_001), None);
        assert_eq!(since(0), "");
        assert_eq!(since(3), " (3 more refused since the last such line)");
    }

    #[test]
    fn a_clock_at_zero_still_logs_the_first() {
        let limiter = Limiter::default();
        assert_eq!(limiter.admit(0), Some(0));
        assert_eq!(limiter.admit(0), None);
    }
}
