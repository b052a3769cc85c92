//! Reading the invocation deadline, which not every emulator sends as Lambda does.
//!
//! Lambda sends `Lambda-Runtime-Deadline-Ms` as Unix milliseconds. Emulators differ:
//! `cargo lambda watch` has sent the time left (600000 for its default timeout) and, in 1.9,
//! sends 0. Read as a timestamp either falls in 1970: every run would yield before its first
//! step, and the execution would end `dispatch_exhausted`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Lambda's longest invocation: a real deadline is never further from now than this.
const MAX_INVOCATION_MS: u64 = 15 * 60 * 1000;

/// What to do with the deadline the runtime hands each invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeadlinePolicy {
    /// Read it as Lambda sends it, with emulators' relative values taken as relative.
    Follow,
    /// Ignore it: runs get no deadline (for emulators whose deadline means nothing).
    Ignore,
}

impl DeadlinePolicy {
    /// The deadline in Unix milliseconds for a raw `deadline_ms` seen at `now_ms`, if any.
    pub(crate) fn resolve(self, raw_ms: u64, now_ms: u64) -> Option<u64> {
        if self == Self::Ignore {
            return None;
        }
        let earliest = now_ms.saturating_sub(MAX_INVOCATION_MS);
        let latest = now_ms.saturating_add(MAX_INVOCATION_MS);
        if (earliest..=latest).contains(&raw_ms) {
            return Some(raw_ms);
        }
        if raw_ms == 0 {
            warn_once(raw_ms, "read as no deadline (cargo lambda 1.9 sends 0)");
            return None;
        }
        if raw_ms <= MAX_INVOCATION_MS {
            warn_once(
                raw_ms,
                "read as the time left, as `cargo lambda watch` sends it",
            );
            return Some(now_ms.saturating_add(raw_ms));
        }
        warn_once(raw_ms, "implausible; runs get no deadline");
        None
    }
}

/// Says once per process that the deadline is not what Lambda sends.
fn warn_once(raw_ms: u64, meaning: &str) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            deadline_ms = raw_ms,
            "the invocation deadline is not a Unix timestamp near now (an emulator?): {meaning}; \
             rebuno_lambda::run(agent).ignore_deadline() turns deadlines off"
        );
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

/// Time from `now_ms` until `deadline_ms`, zero when past.
pub(crate) fn time_left(deadline_ms: u64, now_ms: u64) -> Duration {
    Duration::from_millis(deadline_ms.saturating_sub(now_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_764_000_000_000;

    #[test]
    fn lambda_timestamps_are_kept() {
        let policy = DeadlinePolicy::Follow;
        assert_eq!(policy.resolve(NOW + 3_000, NOW), Some(NOW + 3_000));
        assert_eq!(policy.resolve(NOW - 10, NOW), Some(NOW - 10), "just past");
    }

    #[test]
    fn an_emulators_time_left_counts_from_now() {
        let policy = DeadlinePolicy::Follow;
        assert_eq!(policy.resolve(600_000, NOW), Some(NOW + 600_000));
        assert_eq!(policy.resolve(0, NOW), None, "zero means none");
    }

    #[test]
    fn implausible_deadlines_and_ignore_give_none() {
        assert_eq!(DeadlinePolicy::Follow.resolve(NOW * 2, NOW), None);
        assert_eq!(DeadlinePolicy::Follow.resolve(5_000_000_000, NOW), None);
        assert_eq!(DeadlinePolicy::Ignore.resolve(NOW + 3_000, NOW), None);
    }
}
