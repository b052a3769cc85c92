//! Step latencies from an execution's event log, the same whether the log is read in the kernel
//! process (pinned setup) or through `rebuno::client::Client` (deployed setup).

use anyhow::{Context as _, Result};
use rebuno::wire::Event;

use crate::control::RunReport;
use crate::rfc3339::unix_nanos;
use crate::stats::quantile;

/// When `event` was appended, in Unix nanoseconds (its RFC 3339 `occurred_at`).
pub(crate) fn occurred_nanos(event: &Event) -> Result<i128> {
    unix_nanos(&event.occurred_at)
        .with_context(|| format!("bad event timestamp {:?}", event.occurred_at))
}

/// The step gaps of many executions, gathered one event log at a time.
#[derive(Debug, Default)]
pub(crate) struct StepGaps {
    /// `step.succeeded` events seen.
    steps: usize,
    /// Milliseconds between consecutive `step.succeeded` events of one execution.
    gaps: Vec<f64>,
    /// Milliseconds from a `step.succeeded` to the next `step.proposed`.
    between: Vec<f64>,
    /// Milliseconds from a `step.proposed` to its `step.succeeded`.
    within: Vec<f64>,
}

impl StepGaps {
    /// Adds one execution's log: `(event type, Unix nanoseconds)` in log order.
    pub(crate) fn add<'a>(&mut self, events: impl IntoIterator<Item = (&'a str, i128)>) {
        let ms = |from: i128, to: i128| (to - from) as f64 / 1e6;
        let (mut proposed, mut succeeded) = (Vec::new(), Vec::new());
        for (kind, at) in events {
            match kind {
                "step.proposed" => proposed.push(at),
                "step.succeeded" => succeeded.push(at),
                _ => {}
            }
        }
        self.steps += succeeded.len();
        self.gaps
            .extend(succeeded.windows(2).map(|w| ms(w[0], w[1])));
        if proposed.len() == succeeded.len() {
            self.within
                .extend(proposed.iter().zip(&succeeded).map(|(p, s)| ms(*p, *s)));
            self.between.extend(
                succeeded
                    .iter()
                    .zip(proposed.iter().skip(1))
                    .map(|(s, p)| ms(*s, *p)),
            );
        }
    }

    /// Writes the step count and the latency quantiles into `report`.
    pub(crate) fn fill(mut self, report: &mut RunReport) {
        report.steps = self.steps;
        report.between_p50_ms = finite(quantile(&mut self.between, 0.50));
        report.within_p50_ms = finite(quantile(&mut self.within, 0.50));
        report.step_p50_ms = finite(quantile(&mut self.gaps, 0.50));
        report.step_p99_ms = finite(quantile(&mut self.gaps, 0.99));
    }
}

/// JSON has no NaN: an empty sample is sent as `null`.
pub(crate) fn finite(value: f64) -> Option<f64> {
    value.is_finite().then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_of_one_log() {
        let ms = 1_000_000;
        let mut gaps = StepGaps::default();
        gaps.add([
            ("execution.started", 0),
            ("step.proposed", ms),
            ("step.succeeded", 3 * ms),
            ("step.proposed", 4 * ms),
            ("step.succeeded", 6 * ms),
        ]);
        let mut report = RunReport::default();
        gaps.fill(&mut report);
        assert_eq!(report.steps, 2);
        assert_eq!(report.step_p50_ms, Some(3.0));
        assert_eq!(report.within_p50_ms, Some(2.0));
        assert_eq!(report.between_p50_ms, Some(1.0));
    }
}
