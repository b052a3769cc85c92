//! What a measured phase records: the agent's (and kernel's) readings before and after it, and
//! the figures computed from them and from the phase's [`RunReport`].

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::Result;

use crate::control::RunReport;
use crate::options::{Setup, Variant};
use crate::proc::ContextSwitches;
use crate::spawn::{AllocCounts, Proc};

/// Raw figures: (setup, variant, metric) → one value per repetition.
pub(crate) type Figures = BTreeMap<(Setup, Variant, &'static str), Vec<f64>>;

/// Which column of which table a figure belongs to.
pub(crate) type Key = (Setup, Variant);

pub(crate) fn record(
    figures: &mut Figures,
    (setup, variant): Key,
    metric: &'static str,
    value: f64,
) {
    figures
        .entry((setup, variant, metric))
        .or_default()
        .push(value);
}

/// Readings of the agent and kernel processes at one instant.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    at: Instant,
    cpu: f64,
    kernel_cpu: f64,
    switches: ContextSwitches,
    allocs: Option<AllocCounts>,
}

impl Sample {
    /// Reads both processes (the agent's allocation counters last, so that of the two `stats`
    /// requests around a phase exactly one falls inside it).
    pub(crate) async fn take(agent: &Proc, kernel: &Proc) -> Result<Self> {
        Ok(Self {
            at: Instant::now(),
            cpu: agent.cpu()?,
            kernel_cpu: kernel.cpu()?,
            switches: agent.context_switches()?,
            allocs: agent.allocs().await?,
        })
    }

    /// What happened from `self` to `after`, per step of `steps`.
    pub(crate) fn per_step(&self, after: &Self, steps: f64) -> PerStep {
        let per = |before: u64, after: u64| after.saturating_sub(before) as f64 / steps;
        let allocs = |f: fn(&AllocCounts) -> u64| match (&self.allocs, &after.allocs) {
            (Some(b), Some(a)) => per(f(b), f(a)),
            _ => f64::NAN,
        };
        let cpu = after.cpu - self.cpu;
        PerStep {
            cpu_us: cpu * 1e6 / steps,
            kernel_cpu_us: (after.kernel_cpu - self.kernel_cpu) * 1e6 / steps,
            voluntary: per(self.switches.voluntary, after.switches.voluntary),
            involuntary: per(self.switches.involuntary, after.switches.involuntary),
            allocs: allocs(|c| c.allocs),
            bytes: allocs(|c| c.bytes),
            busy_pct: 100.0 * cpu / (after.at - self.at).as_secs_f64(),
        }
    }
}

/// A phase's agent (and kernel) costs per step.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PerStep {
    pub(crate) cpu_us: f64,
    pub(crate) kernel_cpu_us: f64,
    pub(crate) voluntary: f64,
    pub(crate) involuntary: f64,
    /// `NaN` for the python agent.
    pub(crate) allocs: f64,
    pub(crate) bytes: f64,
    /// The agent's CPU time over the phase's wall time, in percent.
    pub(crate) busy_pct: f64,
}

/// The metric names of one live phase.
pub(crate) struct LiveMetrics {
    /// What the progress line calls the phase.
    pub(crate) label: &'static str,
    cpu: &'static str,
    kernel_cpu: &'static str,
    execs: &'static str,
    steps: &'static str,
    p50: &'static str,
    p99: &'static str,
    between: &'static str,
    within: &'static str,
    rss: &'static str,
    voluntary: &'static str,
    involuntary: &'static str,
    allocs: &'static str,
    bytes: &'static str,
    busy: &'static str,
}

/// No-op tool calls.
pub(crate) const LIVE: LiveMetrics = LiveMetrics {
    label: "live",
    cpu: "live_cpu_us_per_step",
    kernel_cpu: "live_kernel_cpu_us_per_step",
    execs: "live_execs_per_s",
    steps: "live_steps_per_s",
    p50: "live_step_p50_ms",
    p99: "live_step_p99_ms",
    between: "live_between_steps_p50_ms",
    within: "live_within_step_p50_ms",
    rss: "live_peak_rss_kib",
    voluntary: "live_voluntary_switches_per_step",
    involuntary: "live_involuntary_switches_per_step",
    allocs: "live_allocs_per_step",
    bytes: "live_alloc_bytes_per_step",
    busy: "live_agent_busy_pct",
};

/// Durable LLM calls to the stub provider.
pub(crate) const LLM: LiveMetrics = LiveMetrics {
    label: "llm",
    cpu: "llm_cpu_us_per_step",
    kernel_cpu: "llm_kernel_cpu_us_per_step",
    execs: "llm_execs_per_s",
    steps: "llm_steps_per_s",
    p50: "llm_step_p50_ms",
    p99: "llm_step_p99_ms",
    between: "llm_between_steps_p50_ms",
    within: "llm_within_step_p50_ms",
    rss: "llm_peak_rss_kib",
    voluntary: "llm_voluntary_switches_per_step",
    involuntary: "llm_involuntary_switches_per_step",
    allocs: "llm_allocs_per_step",
    bytes: "llm_alloc_bytes_per_step",
    busy: "llm_agent_busy_pct",
};

/// The metric names of one replay phase.
pub(crate) struct ReplayMetrics {
    /// What the progress line calls the phase.
    pub(crate) label: &'static str,
    cpu: &'static str,
    kernel_cpu: &'static str,
    steps: &'static str,
    p50: &'static str,
    p99: &'static str,
    voluntary: &'static str,
    involuntary: &'static str,
    allocs: &'static str,
    bytes: &'static str,
}

/// Replayed tool calls.
pub(crate) const REPLAY: ReplayMetrics = ReplayMetrics {
    label: "replay",
    cpu: "replay_cpu_us_per_step",
    kernel_cpu: "replay_kernel_cpu_us_per_step",
    steps: "replay_steps_per_s",
    p50: "replay_step_p50_ms",
    p99: "replay_step_p99_ms",
    voluntary: "replay_voluntary_switches_per_step",
    involuntary: "replay_involuntary_switches_per_step",
    allocs: "replay_allocs_per_step",
    bytes: "replay_alloc_bytes_per_step",
};

/// Replayed LLM calls.
pub(crate) const LLM_REPLAY: ReplayMetrics = ReplayMetrics {
    label: "llm-replay",
    cpu: "llm_replay_cpu_us_per_step",
    kernel_cpu: "llm_replay_kernel_cpu_us_per_step",
    steps: "llm_replay_steps_per_s",
    p50: "llm_replay_step_p50_ms",
    p99: "llm_replay_step_p99_ms",
    voluntary: "llm_replay_voluntary_switches_per_step",
    involuntary: "llm_replay_involuntary_switches_per_step",
    allocs: "llm_replay_allocs_per_step",
    bytes: "llm_replay_alloc_bytes_per_step",
};

/// A finished live phase: `n` executions of `k` steps, what the run measured, what the agent
/// spent, and the agent's peak RSS after it.
pub(crate) struct LivePhase {
    pub(crate) n: usize,
    pub(crate) k: usize,
    pub(crate) report: RunReport,
    pub(crate) cost: PerStep,
    pub(crate) peak_rss_kib: u64,
}

/// Records a live phase under `names` and prints its progress line.
pub(crate) fn record_live(figures: &mut Figures, key: Key, names: &LiveMetrics, phase: &LivePhase) {
    let LivePhase {
        n,
        k,
        report,
        cost,
        peak_rss_kib,
    } = phase;
    let steps = (n * k) as f64;
    let or_nan = |value: Option<f64>| value.unwrap_or(f64::NAN);
    let mut put = |metric, value| record(figures, key, metric, value);
    put(names.cpu, cost.cpu_us);
    put(names.kernel_cpu, cost.kernel_cpu_us);
    put(names.voluntary, cost.voluntary);
    put(names.involuntary, cost.involuntary);
    put(names.allocs, cost.allocs);
    put(names.bytes, cost.bytes);
    put(names.busy, cost.busy_pct);
    put(names.execs, *n as f64 / report.elapsed_s);
    put(names.steps, steps / report.elapsed_s);
    put(names.p50, or_nan(report.step_p50_ms));
    put(names.between, or_nan(report.between_p50_ms));
    put(names.within, or_nan(report.within_p50_ms));
    put(names.p99, or_nan(report.step_p99_ms));
    put(names.rss, *peak_rss_kib as f64);
    if report.steps != n * k {
        eprintln!(
            "warning: {} steps recorded, expected {}",
            report.steps,
            n * k
        );
    }
    eprintln!(
        "  {}: {:.0} exec/s, {:.1} µs agent CPU/step ({:.1} kernel), p50 {:.2} ms, {:.1} allocs/step, {:.2}+{:.2} switches/step, agent busy {:.0} %",
        names.label,
        *n as f64 / report.elapsed_s,
        cost.cpu_us,
        cost.kernel_cpu_us,
        or_nan(report.step_p50_ms),
        cost.allocs,
        cost.voluntary,
        cost.involuntary,
        cost.busy_pct,
    );
}

/// Records a replay phase under `names` and prints its progress line.
pub(crate) fn record_replay(
    figures: &mut Figures,
    key: Key,
    names: &ReplayMetrics,
    report: &RunReport,
    cost: &PerStep,
) {
    let steps = report.steps.max(1) as f64;
    let mut put = |metric, value| record(figures, key, metric, value);
    put(names.cpu, cost.cpu_us);
    put(names.kernel_cpu, cost.kernel_cpu_us);
    put(names.voluntary, cost.voluntary);
    put(names.involuntary, cost.involuntary);
    put(names.allocs, cost.allocs);
    put(names.bytes, cost.bytes);
    put(names.steps, steps / report.elapsed_s);
    put(names.p50, report.step_p50_ms.unwrap_or(f64::NAN));
    put(names.p99, report.step_p99_ms.unwrap_or(f64::NAN));
    eprintln!(
        "  {}: {:.0} steps/s, {:.1} µs agent CPU/step ({:.1} kernel), {:.1} allocs/step, {:.2}+{:.2} switches/step",
        names.label,
        steps / report.elapsed_s,
        cost.cpu_us,
        cost.kernel_cpu_us,
        cost.allocs,
        cost.voluntary,
        cost.involuntary,
    );
}

/// Warns when the stub provider was asked `calls` times rather than `expected`.
pub(crate) fn warn_provider_calls(calls: usize, expected: usize) {
    if calls != expected {
        eprintln!("warning: the stub provider answered {calls} requests, expected {expected}");
    }
}
