//! Counters behind `GET /metrics` (Prometheus text format 0.0.4).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Kernel;
use crate::store::lock;
use rebuno::wire::ExecutionStatus;

/// Every status, so each series exists from the first scrape.
const STATUSES: [ExecutionStatus; 6] = [
    ExecutionStatus::Pending,
    ExecutionStatus::Running,
    ExecutionStatus::Blocked,
    ExecutionStatus::Completed,
    ExecutionStatus::Failed,
    ExecutionStatus::Cancelled,
];

/// Process-lifetime counters.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    acked: AtomicU64,
    failed: AtomicU64,
    decisions: Mutex<BTreeMap<String, u64>>,
}

impl Metrics {
    /// Counts one webhook delivery attempt.
    pub(crate) fn delivery(&self, delivered: bool) {
        let counter = if delivered { &self.acked } else { &self.failed };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one step submission by its decision.
    pub(crate) fn decision(&self, decision: &str) {
        *lock(&self.decisions)
            .entry(decision.to_owned())
            .or_insert(0) += 1;
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

impl Kernel {
    /// The Prometheus exposition.
    pub(crate) fn render_metrics(&self) -> String {
        let mut out = String::new();
        family(
            &mut out,
            "rebuno_executions",
            "gauge",
            "Executions by status.",
        );
        let mut by_status: BTreeMap<&'static str, u64> =
            STATUSES.iter().map(|status| (status.as_str(), 0)).collect();
        for cell in self.store().executions_desc() {
            *by_status
                .entry(cell.lock().exec.status.as_str())
                .or_insert(0) += 1;
        }
        for (status, count) in by_status {
            let _ = writeln!(out, "rebuno_executions{{status=\"{status}\"}} {count}");
        }
        let metrics = self.metrics();
        family(
            &mut out,
            "rebuno_dispatch_deliveries_total",
            "counter",
            "Webhook delivery attempts by outcome.",
        );
        for (outcome, counter) in [("acked", &metrics.acked), ("failed", &metrics.failed)] {
            let value = counter.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "rebuno_dispatch_deliveries_total{{outcome=\"{outcome}\"}} {value}"
            );
        }
        family(
            &mut out,
            "rebuno_steps_total",
            "counter",
            "Step submissions by decision.",
        );
        for (decision, count) in lock(&metrics.decisions).iter() {
            let _ = writeln!(out, "rebuno_steps_total{{decision=\"{decision}\"}} {count}");
        }
        out
    }
}
