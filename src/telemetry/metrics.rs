//! The SDK's metrics, aggregated in process and exported with the spans (cumulative, so a
//! lost export loses nothing but resolution).

use std::collections::BTreeMap;

/// Upper bounds (milliseconds) of the latency histograms' buckets.
pub(crate) const LATENCY_BOUNDS_MS: [f64; 14] = [
    1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 60000.0,
];

/// A histogram over [`LATENCY_BOUNDS_MS`].
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Histogram {
    pub(crate) counts: [u64; LATENCY_BOUNDS_MS.len() + 1],
    pub(crate) count: u64,
    pub(crate) sum: f64,
}

impl Histogram {
    pub(crate) fn record(&mut self, millis: f64) {
        let bucket = LATENCY_BOUNDS_MS
            .iter()
            .position(|bound| millis <= *bound)
            .unwrap_or(LATENCY_BOUNDS_MS.len());
        self.counts[bucket] += 1;
        self.count += 1;
        self.sum += millis;
    }
}

/// Attribute values identifying one series, in a fixed order per metric.
pub(crate) type SeriesKey = Vec<(&'static str, String)>;

/// Every metric the SDK keeps.
#[derive(Debug, Clone, Default)]
pub(crate) struct Metrics {
    /// When the process started counting (the cumulative series' start).
    pub(crate) start_unix_nanos: u64,
    /// `rebuno.runs.in_flight`: dispatch runs in this process now.
    pub(crate) runs_in_flight: i64,
    /// `rebuno.dispatches`: finished runs by `outcome` (and `stop`).
    pub(crate) dispatches: BTreeMap<SeriesKey, u64>,
    /// `rebuno.steps`: finished durable calls by `kind`, `outcome` and `replayed`, and by
    /// `attempts` for those whose body ran more than once.
    pub(crate) steps: BTreeMap<SeriesKey, u64>,
    /// `rebuno.step.duration`: durable calls' wall time by `kind` and `replayed`.
    pub(crate) step_duration: BTreeMap<SeriesKey, Histogram>,
    /// `rebuno.ack.duration`: from a dispatch's arrival to its acknowledgement.
    pub(crate) ack_duration: Histogram,
    /// `rebuno.kernel.retries`: kernel requests sent again after a failure.
    pub(crate) kernel_retries: u64,
    /// `rebuno.telemetry.dropped_spans`: spans dropped because the buffer was full.
    pub(crate) dropped_spans: u64,
    /// Whether anything changed since the last export.
    pub(crate) dirty: bool,
    /// When the metrics were last sent (0: never).
    pub(crate) exported_unix_nanos: u64,
}

impl Metrics {
    pub(crate) fn new(start_unix_nanos: u64) -> Self {
        Self {
            start_unix_nanos,
            ..Self::default()
        }
    }

    pub(crate) fn run_started(&mut self) {
        self.runs_in_flight += 1;
        self.dirty = true;
    }

    pub(crate) fn run_finished(&mut self, outcome: &str, stop: Option<&str>) {
        self.runs_in_flight -= 1;
        let mut key = vec![("outcome", outcome.to_owned())];
        if let Some(stop) = stop {
            key.push(("stop", stop.to_owned()));
        }
        *self.dispatches.entry(key).or_default() += 1;
        self.dirty = true;
    }

    /// A durable call whose body ran once (or not at all) ended.
    #[cfg(test)]
    pub(crate) fn step_finished(&mut self, kind: &str, outcome: &str, replayed: bool, millis: f64) {
        self.step_attempts_finished(kind, outcome, replayed, 1, millis);
    }

    /// A durable call ended; `attempts` is how many times its body ran (its retries).
    pub(crate) fn step_attempts_finished(
        &mut self,
        kind: &str,
        outcome: &str,
        replayed: bool,
        attempts: i64,
        millis: f64,
    ) {
        let replayed = replayed.to_string();
        let mut key = vec![
            ("kind", kind.to_owned()),
            ("outcome", outcome.to_owned()),
            ("replayed", replayed.clone()),
        ];
        if attempts > 1 {
            key.push(("attempts", attempts.to_string()));
        }
        *self.steps.entry(key).or_default() += 1;
        let key = vec![("kind", kind.to_owned()), ("replayed", replayed)];
        self.step_duration.entry(key).or_default().record(millis);
        self.dirty = true;
    }

    pub(crate) fn acked(&mut self, millis: f64) {
        self.ack_duration.record(millis);
        self.dirty = true;
    }

    pub(crate) fn kernel_retry(&mut self) {
        self.kernel_retries += 1;
        self.dirty = true;
    }

    pub(crate) fn spans_dropped(&mut self, count: u64) {
        self.dropped_spans += count;
        self.dirty = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_counts_into_the_first_bucket_that_holds_the_value() {
        let mut histogram = Histogram::default();
        histogram.record(0.2);
        histogram.record(1.0);
        histogram.record(3.0);
        histogram.record(1e9);
        assert_eq!(histogram.counts[0], 2);
        assert_eq!(histogram.counts[2], 1);
        assert_eq!(histogram.counts[LATENCY_BOUNDS_MS.len()], 1);
        assert_eq!(histogram.count, 4);
    }

    #[test]
    fn steps_are_counted_by_kind_outcome_and_replay() {
        let mut metrics = Metrics::new(0);
        metrics.step_finished("tool_call", "succeeded", false, 3.0);
        metrics.step_finished("tool_call", "succeeded", true, 0.5);
        metrics.step_finished("tool_call", "succeeded", true, 0.5);
        assert_eq!(metrics.steps.len(), 2);
        assert_eq!(metrics.steps.values().sum::<u64>(), 3);
        assert!(metrics.dirty);
    }

    #[test]
    fn steps_that_retried_are_counted_by_their_attempts() {
        let mut metrics = Metrics::new(0);
        metrics.step_attempts_finished("tool_call", "succeeded", false, 3, 3.0);
        metrics.step_attempts_finished("tool_call", "succeeded", false, 1, 3.0);
        let retried: Vec<_> = metrics
            .steps
            .keys()
            .filter(|key| key.contains(&("attempts", "3".to_owned())))
            .collect();
        assert_eq!(retried.len(), 1, "{:?}", metrics.steps);
        assert_eq!(metrics.steps.len(), 2, "one attempt adds no attribute");
    }
}
