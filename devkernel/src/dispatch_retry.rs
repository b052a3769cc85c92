//! How webhook deliveries are retried: the attempts a dispatch gets before `dispatch_exhausted`
//! and the backoff between them, as the Go kernel's `DispatchMaxAttempts`, `DispatchBaseDelay`
//! and `DispatchMaxDelay`. `rebuno-dev` reads them from its flags, its environment and its
//! manifest; [`DevKernelBuilder`](crate::DevKernelBuilder) takes them one by one, or all at
//! once with [`dispatch_retry`](crate::DevKernelBuilder::dispatch_retry).

use std::time::Duration;

use crate::policy::duration::parse_go_duration;

/// Delivery attempts of a dispatch before `dispatch_exhausted` (the Go kernel's default).
pub(crate) const DEFAULT_MAX_ATTEMPTS: u32 = 5;
/// The first retry delay (the Go kernel's default).
pub(crate) const DEFAULT_BASE_DELAY: Duration = Duration::from_secs(1);
/// The largest retry delay, before jitter (the Go kernel's default).
pub(crate) const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(30);

/// The names of one setting: its `rebuno-dev` flag, its environment variable and its
/// manifest key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Names {
    /// `--dispatch-...`.
    pub(crate) flag: &'static str,
    /// `REBUNO_DISPATCH_...`.
    pub(crate) env: &'static str,
    /// `dispatch_...`, a top-level key of the manifest.
    pub(crate) key: &'static str,
}

/// `--dispatch-max-attempts`, `REBUNO_DISPATCH_MAX_ATTEMPTS`, `dispatch_max_attempts`.
pub(crate) const MAX_ATTEMPTS: Names = Names {
    flag: "--dispatch-max-attempts",
    env: "REBUNO_DISPATCH_MAX_ATTEMPTS",
    key: "dispatch_max_attempts",
};
/// `--dispatch-base-delay`, `REBUNO_DISPATCH_BASE_DELAY`, `dispatch_base_delay`.
pub(crate) const BASE_DELAY: Names = Names {
    flag: "--dispatch-base-delay",
    env: "REBUNO_DISPATCH_BASE_DELAY",
    key: "dispatch_base_delay",
};
/// `--dispatch-max-delay`, `REBUNO_DISPATCH_MAX_DELAY`, `dispatch_max_delay`.
pub(crate) const MAX_DELAY: Names = Names {
    flag: "--dispatch-max-delay",
    env: "REBUNO_DISPATCH_MAX_DELAY",
    key: "dispatch_max_delay",
};

/// Retry settings of webhook deliveries, each `None` when not given: a failed delivery is
/// tried again after `min(base_delay * 2^(attempt-1), max_delay)` plus up to 25 % jitter,
/// until `max_attempts` attempts have failed and the execution fails `dispatch_exhausted`
/// (defaults 5, 1 s, 30 s, as the Go kernel's). A lease that expires is reclaimed and
/// delivered again at once, as the next attempt of the same dispatch.
///
/// ```
/// use std::time::Duration;
/// use rebuno_devkernel::{DevKernel, DispatchRetry};
///
/// let mut retry = DispatchRetry::default();
/// retry.max_attempts = Some(8);
/// let builder = DevKernel::builder().dispatch_retry(retry)?; // 1 s doubling to 30 s, 8 attempts
/// # let _ = builder;
/// # Ok::<(), rebuno_devkernel::DispatchRetryError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DispatchRetry {
    /// Attempts before `dispatch_exhausted` (at least 1).
    pub max_attempts: Option<u32>,
    /// The first retry delay.
    pub base_delay: Option<Duration>,
    /// The largest retry delay, before jitter (not below `base_delay`).
    pub max_delay: Option<Duration>,
}

/// Retry settings that do not go together, e.g. a base delay above the max delay; the message
/// says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DispatchRetryError(String);

impl DispatchRetry {
    /// Each setting given here, else the one `fallback` gives (flag over environment over
    /// manifest, in `rebuno-dev`).
    #[must_use]
    pub fn or(self, fallback: Self) -> Self {
        Self {
            max_attempts: self.max_attempts.or(fallback.max_attempts),
            base_delay: self.base_delay.or(fallback.base_delay),
            max_delay: self.max_delay.or(fallback.max_delay),
        }
    }

    /// The settings given here over `attempts`, `base` and `max` (the builder's), once they
    /// are checked together.
    pub(crate) fn checked(
        self,
        attempts: u32,
        base: Duration,
        max: Duration,
    ) -> Result<(u32, Duration, Duration), DispatchRetryError> {
        let attempts = self.max_attempts.unwrap_or(attempts);
        let (base, max) = (
            self.base_delay.unwrap_or(base),
            self.max_delay.unwrap_or(max),
        );
        if attempts == 0 {
            return Err(DispatchRetryError(zero_attempts(MAX_ATTEMPTS.flag)));
        }
        if base > max {
            return Err(DispatchRetryError(format!(
                "the dispatch base delay ({base:?}) is above the max delay ({max:?}); lower the \
                 base delay ({}, {} or the manifest's {}) or raise the max delay ({}, {} or {})",
                BASE_DELAY.flag,
                BASE_DELAY.env,
                BASE_DELAY.key,
                MAX_DELAY.flag,
                MAX_DELAY.env,
                MAX_DELAY.key
            )));
        }
        Ok((attempts, base, max))
    }

    /// The settings `rebuno-dev` takes from its flags, else from its environment: `flag(name)`
    /// is the value given to the flag `name` (`--dispatch-max-attempts`,
    /// `--dispatch-base-delay`, `--dispatch-max-delay`), `env(name)` the variable's
    /// (`REBUNO_DISPATCH_MAX_ATTEMPTS`, `REBUNO_DISPATCH_BASE_DELAY`,
    /// `REBUNO_DISPATCH_MAX_DELAY`; unset or empty: not given). Counts are whole numbers, 1 or
    /// more; delays are Go durations (`500ms`, `1m30s`).
    ///
    /// # Errors
    ///
    /// [`DispatchRetryError`] naming the flag or variable whose value does not parse.
    pub fn from_flags_and_env(
        flag: impl Fn(&str) -> Option<String>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, DispatchRetryError> {
        let flags = Self::read(|names| flag(names.flag).map(|text| (text, names.flag)))?;
        let set = |names: Names| env(names.env).filter(|text| !text.trim().is_empty());
        let from_env = Self::read(|names| set(names).map(|text| (text, names.env)))?;
        Ok(flags.or(from_env))
    }

    /// The settings `value` gives, each with the flag or variable it came from.
    fn read(
        value: impl Fn(Names) -> Option<(String, &'static str)>,
    ) -> Result<Self, DispatchRetryError> {
        let delay = |names| value(names).map(|(text, from)| parse_delay(&text, from));
        let attempts = value(MAX_ATTEMPTS).map(|(text, from)| parse_attempts(&text, from));
        Ok(Self {
            max_attempts: attempts.transpose().map_err(DispatchRetryError)?,
            base_delay: delay(BASE_DELAY).transpose().map_err(DispatchRetryError)?,
            max_delay: delay(MAX_DELAY).transpose().map_err(DispatchRetryError)?,
        })
    }
}

fn zero_attempts(source: &str) -> String {
    format!(
        "{source} is 0: a dispatch needs at least 1 attempt; set 1 or more (the default is \
         {DEFAULT_MAX_ATTEMPTS})"
    )
}

/// A count of attempts from `source` (a flag, variable or manifest key): a whole number, 1 or
/// more.
pub(crate) fn parse_attempts(text: &str, source: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(0) => Err(zero_attempts(source)),
        Ok(attempts) => Ok(attempts),
        Err(_) => Err(format!(
            "{source} {text:?} is not a number of attempts; set a whole number, 1 or more \
             (the default is {DEFAULT_MAX_ATTEMPTS})"
        )),
    }
}

/// A delay from `source` in Go's duration syntax (`500ms`, `1s`, `1m30s`).
pub(crate) fn parse_delay(text: &str, source: &str) -> Result<Duration, String> {
    parse_go_duration(text).ok_or_else(|| {
        format!("{source} {text:?} is not a duration; write it as Go does, e.g. 500ms, 2s or 1m30s")
    })
}

/// How long the retries of a failing dispatch wait in all, jitter left out, from its attempt
/// `from` to its last: what an agent outage may last once a delivery fails (`from` 1: before
/// the first delivery; `from` 2: after a lease expiry reclaimed the first attempt).
pub(crate) fn retry_window(
    max_attempts: u32,
    base: Duration,
    cap: Duration,
    from: u32,
) -> Duration {
    (from.max(1)..max_attempts)
        .map(|attempt| {
            let exp = attempt.saturating_sub(1).min(20);
            base.saturating_mul(1u32 << exp).min(cap)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_and_delays_are_parsed_and_refused_with_the_fix() {
        assert_eq!(parse_attempts(" 8 ", "X"), Ok(8));
        let zero = parse_attempts("0", "--dispatch-max-attempts").unwrap_err();
        assert!(zero.starts_with("--dispatch-max-attempts is 0: "), "{zero}");
        assert!(zero.contains("set 1 or more (the default is 5)"), "{zero}");
        for bad in ["-1", "five", "", "2.5"] {
            let error = parse_attempts(bad, "REBUNO_DISPATCH_MAX_ATTEMPTS").unwrap_err();
            assert!(error.contains("is not a number of attempts"), "{error}");
        }
        assert_eq!(parse_delay("1m30s", "X"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_delay("250ms", "X"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_delay("0", "X"), Ok(Duration::ZERO));
        for bad in ["1", "fast", "-1s", "1d"] {
            let error = parse_delay(bad, "dispatch_base_delay").unwrap_err();
            assert!(error.starts_with("dispatch_base_delay \""), "{error}");
            assert!(error.ends_with("e.g. 500ms, 2s or 1m30s"), "{error}");
        }
    }

    #[test]
    fn settings_merge_and_are_checked_together() {
        let flag = DispatchRetry {
            max_attempts: Some(2),
            ..DispatchRetry::default()
        };
        let manifest = DispatchRetry {
            max_attempts: Some(9),
            base_delay: Some(Duration::from_secs(40)),
            max_delay: None,
        };
        let merged = flag.or(manifest);
        assert_eq!(merged.max_attempts, Some(2));
        assert_eq!(merged.base_delay, Some(Duration::from_secs(40)));
        // 40 s against the default max of 30 s.
        let defaults = (DEFAULT_MAX_ATTEMPTS, DEFAULT_BASE_DELAY, DEFAULT_MAX_DELAY);
        let check = |retry: DispatchRetry| retry.checked(defaults.0, defaults.1, defaults.2);
        let error = check(merged).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("the dispatch base delay (40s) is above the max delay (30s); "),
            "{error}"
        );
        assert!(
            error.to_string().contains("--dispatch-max-delay"),
            "{error}"
        );
        let zero = DispatchRetry {
            max_attempts: Some(0),
            ..DispatchRetry::default()
        };
        assert!(check(zero).is_err());
        let fine = DispatchRetry {
            max_delay: Some(Duration::from_secs(40)),
            ..merged
        };
        let expected = (2, Duration::from_secs(40), Duration::from_secs(40));
        assert_eq!(check(fine), Ok(expected));
    }

    #[test]
    fn the_default_retries_wait_fourteen_seconds_after_a_lease_expiry() {
        let window =
            |attempts, from| retry_window(attempts, DEFAULT_BASE_DELAY, DEFAULT_MAX_DELAY, from);
        // Attempts 1..5 of an unreachable agent: 1 + 2 + 4 + 8 s between them.
        assert_eq!(window(DEFAULT_MAX_ATTEMPTS, 1), Duration::from_secs(15));
        // Attempt 1 was delivered and its lease expired: attempt 2 at once, then 2 + 4 + 8 s.
        assert_eq!(window(DEFAULT_MAX_ATTEMPTS, 2), Duration::from_secs(14));
        // The README's recommendation for Workers: 8 attempts, 2 + 4 + 8 + 16 + 30 + 30 s.
        assert_eq!(window(8, 2), Duration::from_secs(90));
        assert_eq!(window(1, 1), Duration::ZERO);
    }
}
