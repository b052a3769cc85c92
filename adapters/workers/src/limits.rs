//! How long an acknowledged run may last, and when it stops starting steps.

use std::time::Duration;

use rebuno::rt::Deadline;

/// The variable that overrides [`Limits::wait_until`], in seconds (decimals allowed).
pub const WAIT_UNTIL_VAR: &str = "REBUNO_WAIT_UNTIL_SECONDS";
/// The variable that overrides [`Limits::margin`], in seconds (decimals allowed).
pub const MARGIN_VAR: &str = "REBUNO_DEADLINE_MARGIN_SECONDS";

/// The time budget of each acknowledged run, turned into a [`Deadline`] per request.
///
/// Cloudflare cancels `ctx.wait_until` work about **30 s** after the response is sent. A run
/// therefore gets a deadline of *request time + [`wait_until`](Self::wait_until)* (default
/// 30 s), and starts no new step within [`margin`](Self::margin) of it (default 10 s, so no
/// step starts after 20 s). The step in flight finishes and is recorded; the dispatch then ends
/// without failing the execution, and the kernel re-delivers it once the lease expires, where
/// the recorded steps replay and the run carries on.
///
/// Pick the margin above your slowest step (an LLM call, a tool): a step still running when the
/// Worker is cancelled is lost and runs again on the re-delivery (or ends `indeterminate` if it
/// is `at_most_once`).
///
/// ```
/// use std::time::Duration;
///
/// let limits = rebuno_workers::Limits::default().margin(Duration::from_secs(15));
/// assert_eq!(limits.deadline(1_000).unix_millis(), 31_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    wait_until: Duration,
    margin: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            wait_until: Self::DEFAULT_WAIT_UNTIL,
            margin: Self::DEFAULT_MARGIN,
        }
    }
}

impl Limits {
    /// How long Cloudflare lets `waitUntil` work run after the response.
    pub const DEFAULT_WAIT_UNTIL: Duration = Duration::from_secs(30);
    /// The default margin: no new step in the last 10 s.
    pub const DEFAULT_MARGIN: Duration = Duration::from_secs(10);

    /// The defaults, overridden by the Worker's `REBUNO_WAIT_UNTIL_SECONDS` and
    /// `REBUNO_DEADLINE_MARGIN_SECONDS` variables where they are set; a value that is not a
    /// non-negative number is ignored with a warning.
    pub fn from_env(env: &worker::Env) -> Self {
        let read = |name: &str| env.var(name).ok().map(|var| var.to_string());
        Self::from_lookup(read)
    }

    fn from_lookup(read: impl Fn(&str) -> Option<String>) -> Self {
        let limits = Self::default();
        let limits = match seconds(&read, WAIT_UNTIL_VAR) {
            Some(value) => limits.wait_until(value),
            None => limits,
        };
        match seconds(&read, MARGIN_VAR) {
            Some(value) => limits.margin(value),
            None => limits,
        }
    }

    /// How long after the request the host cuts the run off (default 30 s).
    #[must_use]
    pub fn wait_until(mut self, budget: Duration) -> Self {
        self.wait_until = budget;
        self
    }

    /// Start no step this close to the cut-off (default 10 s).
    #[must_use]
    pub fn margin(mut self, margin: Duration) -> Self {
        self.margin = margin;
        self
    }

    /// The deadline of a request received at `now_millis` (Unix milliseconds).
    ///
    /// A margin of more than half the budget is capped at half, so every slice can still run
    /// steps (a margin as long as the budget would yield before the first step, forever).
    pub fn deadline(&self, now_millis: u64) -> Deadline {
        let budget = u64::try_from(self.wait_until.as_millis()).unwrap_or(u64::MAX);
        let margin = self.margin.min(self.wait_until / 2);
        Deadline::at_unix_millis(now_millis.saturating_add(budget)).margin(margin)
    }
}

/// A variable in seconds, if set to a usable number.
fn seconds(read: &impl Fn(&str) -> Option<String>, name: &str) -> Option<Duration> {
    let text = read(name)?;
    let parsed = text.trim().parse::<f64>().ok();
    let duration = parsed.and_then(|s| Duration::try_from_secs_f64(s).ok());
    if duration.is_none() {
        tracing::warn!(variable = name, value = %text, "ignored: not a number of seconds");
    }
    duration
}

/// Converts a JS timestamp (a float of milliseconds) to whole milliseconds, clamping nonsense.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub(crate) fn millis_from_js(millis: f64) -> u64 {
    if millis.is_finite() && millis > 0.0 {
        // Saturating float-to-int conversion; timestamps fit in u64 by many orders of magnitude.
        millis as u64
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    #[test]
    fn js_timestamps_become_whole_millis() {
        assert_eq!(millis_from_js(1_764_000_000_123.9), 1_764_000_000_123);
        assert_eq!(millis_from_js(f64::NAN), 0);
        assert_eq!(millis_from_js(-5.0), 0);
    }

    #[test]
    fn defaults_match_the_wait_until_cap() {
        let deadline = Limits::default().deadline(1_000);
        assert_eq!(deadline.unix_millis(), 31_000);
        assert!(!deadline.is_near(20_999));
        assert!(deadline.is_near(21_000));
    }

    #[test]
    fn the_margin_leaves_half_the_budget() {
        let limits = Limits::default()
            .wait_until(Duration::from_secs(4))
            .margin(Duration::from_secs(30));
        let deadline = limits.deadline(0);
        assert!(!deadline.is_near(1_999));
        assert!(deadline.is_near(2_000));
    }

    #[test]
    fn variables_override_and_bad_values_are_ignored() {
        let limits = Limits::from_lookup(lookup(&[(WAIT_UNTIL_VAR, "3"), (MARGIN_VAR, "1.5")]));
        assert_eq!(
            limits,
            Limits::default()
                .wait_until(Duration::from_secs(3))
                .margin(Duration::from_millis(1500))
        );
        let limits = Limits::from_lookup(lookup(&[(WAIT_UNTIL_VAR, "soon"), (MARGIN_VAR, "-1")]));
        assert_eq!(limits, Limits::default());
    }
}
