//! The printed report: one table per setup, a column per variant, ratio columns, targets.

use std::time::Duration;

use crate::measure::Figures;
use crate::options::{Options, Setup, Variant};
use crate::stats::median;

/// One line of the table.
struct Row {
    label: &'static str,
    metric: &'static str,
    scale: f64,
    decimals: usize,
    target: &'static str,
}

const fn row(label: &'static str, metric: &'static str, decimals: usize) -> Row {
    Row {
        label,
        metric,
        scale: 1.0,
        decimals,
        target: "",
    }
}

const fn scaled(label: &'static str, metric: &'static str, scale: f64, decimals: usize) -> Row {
    Row {
        label,
        metric,
        scale,
        decimals,
        target: "",
    }
}

const fn target(mut row: Row, target: &'static str) -> Row {
    row.target = target;
    row
}

const MIB: f64 = 1.0 / 1024.0;

const ROWS: &[Row] = &[
    target(
        row("agent CPU per live step (µs)", "live_cpu_us_per_step", 1),
        "≤ python/30, ≤ 1.1× floor",
    ),
    target(
        row(
            "agent CPU per replayed step (µs)",
            "replay_cpu_us_per_step",
            1,
        ),
        "≤ python/30, ≤ 1.1× floor",
    ),
    row(
        "agent busy during live (% of a CPU)",
        "live_agent_busy_pct",
        0,
    ),
    row(
        "agent context switches per live step (voluntary)",
        "live_voluntary_switches_per_step",
        2,
    ),
    row("  (involuntary)", "live_involuntary_switches_per_step", 3),
    row(
        "agent context switches per replayed step (voluntary)",
        "replay_voluntary_switches_per_step",
        2,
    ),
    row("  (involuntary)", "replay_involuntary_switches_per_step", 3),
    row("agent allocations per live step", "live_allocs_per_step", 1),
    row(
        "agent bytes allocated per live step",
        "live_alloc_bytes_per_step",
        0,
    ),
    row(
        "agent allocations per replayed step",
        "replay_allocs_per_step",
        1,
    ),
    row(
        "agent bytes allocated per replayed step",
        "replay_alloc_bytes_per_step",
        0,
    ),
    target(
        row("executions/s (live)", "live_execs_per_s", 0),
        "≥ 20× python",
    ),
    row("steps/s (live)", "live_steps_per_s", 0),
    row("steps/s (replay)", "replay_steps_per_s", 0),
    row("live step latency p50 (ms)", "live_step_p50_ms", 3),
    row("live step latency p99 (ms)", "live_step_p99_ms", 3),
    row(
        "  of which: complete→next submit p50",
        "live_between_steps_p50_ms",
        3,
    ),
    row(
        "  of which: submit→complete p50",
        "live_within_step_p50_ms",
        3,
    ),
    row("replayed step latency p50 (ms)", "replay_step_p50_ms", 3),
    row("replayed step latency p99 (ms)", "replay_step_p99_ms", 3),
    scaled("agent peak RSS (MiB)", "live_peak_rss_kib", MIB, 1),
    target(
        scaled(
            "RSS per idle in-flight exec (KB)",
            "idle_bytes_per_exec",
            1e-3,
            2,
        ),
        "≤ 10 KB",
    ),
    row("  agent sockets per idle exec", "idle_fds_per_exec", 2),
    scaled(
        "  RSS per idle exec, 7 s later (KB)",
        "idle_settled_bytes_per_exec",
        1e-3,
        2,
    ),
    row(
        "  agent sockets per idle exec, 7 s later",
        "idle_settled_fds_per_exec",
        2,
    ),
    target(
        scaled(
            "RSS per idle exec, paced (KB)",
            "idle_paced_bytes_per_exec",
            1e-3,
            2,
        ),
        "≤ 10 KB",
    ),
    row(
        "  agent sockets per idle exec, paced",
        "idle_paced_fds_per_exec",
        3,
    ),
    row(
        "kernel CPU per live step (µs)",
        "live_kernel_cpu_us_per_step",
        1,
    ),
    row("agent CPU per LLM call (µs)", "llm_cpu_us_per_step", 1),
    row(
        "agent CPU per replayed LLM call (µs)",
        "llm_replay_cpu_us_per_step",
        1,
    ),
    row(
        "agent context switches per LLM call (voluntary)",
        "llm_voluntary_switches_per_step",
        2,
    ),
    row("  (involuntary)", "llm_involuntary_switches_per_step", 3),
    row("agent allocations per LLM call", "llm_allocs_per_step", 1),
    row(
        "agent allocations per replayed LLM call",
        "llm_replay_allocs_per_step",
        1,
    ),
    row("executions/s (llm)", "llm_execs_per_s", 0),
    row("LLM calls/s", "llm_steps_per_s", 0),
    row("replayed LLM calls/s", "llm_replay_steps_per_s", 0),
    row("LLM step latency p50 (ms)", "llm_step_p50_ms", 3),
    row("LLM step latency p99 (ms)", "llm_step_p99_ms", 3),
    row(
        "  of which: complete→next submit p50",
        "llm_between_steps_p50_ms",
        3,
    ),
    row(
        "  of which: submit→complete p50",
        "llm_within_step_p50_ms",
        3,
    ),
    row(
        "replayed LLM step latency p50 (ms)",
        "llm_replay_step_p50_ms",
        3,
    ),
    row(
        "replayed LLM step latency p99 (ms)",
        "llm_replay_step_p99_ms",
        3,
    ),
    scaled("agent peak RSS, llm (MiB)", "llm_peak_rss_kib", MIB, 1),
    row(
        "kernel+stub CPU per LLM call (µs)",
        "llm_kernel_cpu_us_per_step",
        1,
    ),
    row("ack latency p50, from schedule (ms)", "ack_p50_ms", 3),
    target(
        row("ack latency p99, from schedule (ms)", "ack_p99_ms", 3),
        "≤ 2 ms at 1000/s",
    ),
    row("ack latency max (ms)", "ack_max_ms", 3),
    row("ack latency from send p50 (ms)", "ack_send_p50_ms", 3),
    row("ack latency from send p99 (ms)", "ack_send_p99_ms", 3),
    row("agent CPU per ack (µs)", "ack_cpu_us_per_dispatch", 1),
];

/// The medians of one setup's figures.
struct Medians<'a> {
    figures: &'a Figures,
    setup: Setup,
}

impl Medians<'_> {
    fn get(&self, variant: Variant, metric: &str) -> f64 {
        self.figures
            .iter()
            .find(|((s, v, m), _)| *s == self.setup && *v == variant && *m == metric)
            .map_or(f64::NAN, |(_, values)| median(values.iter().copied()))
    }
}

/// Prints every setup's table and targets.
pub(crate) fn print(options: &Options, pin: bool, figures: &Figures, cpus: usize, took: Duration) {
    let o = options;
    println!();
    println!(
        "rebuno-bench: {cpus} CPUs ({}); N={} (python {}) K={} M={} reps={} ack {}/s x {} s; took {:.0} s",
        cpu_model(),
        o.n,
        o.n_python,
        o.k,
        o.m,
        o.reps,
        o.ack_rate,
        o.ack_secs,
        took.as_secs_f64()
    );
    println!(
        "medians of {} interleaved repetitions (setups and variants rotating); rust-ct and floor-ct: the agent on a current-thread Tokio runtime, the others on a multi-thread one",
        o.reps
    );
    for &setup in &o.setups {
        println!();
        println!("{}", describe(o, setup, pin));
        println!();
        let medians = Medians { figures, setup };
        let variants = o.variants_of(setup);
        table(&variants, &medians);
        println!();
        targets(o, &variants, &medians);
    }
    if o.setups.contains(&Setup::Light) && o.setups.contains(&Setup::Pinned) {
        println!();
        light_against_full(figures);
    }
}

/// The light load's agent CPU per live step against the full load's (pinned), per rust
/// variant measured in both.
fn light_against_full(figures: &Figures) {
    let light = Medians {
        figures,
        setup: Setup::Light,
    };
    let full = Medians {
        figures,
        setup: Setup::Pinned,
    };
    for variant in [Variant::Rust, Variant::RustCt, Variant::Python] {
        let (l, f) = (
            light.get(variant, "live_cpu_us_per_step"),
            full.get(variant, "live_cpu_us_per_step"),
        );
        if l.is_finite() && f.is_finite() {
            let judged = if variant == Variant::Python {
                String::new()
            } else {
                format!(
                    " (target ≤ 1.3×): {}",
                    if l <= 1.3 * f { "met" } else { "MISSED" }
                )
            };
            println!(
                "[light/pinned] {} agent CPU per live step at light load / at full load = {:.2}×{judged}",
                variant.name(),
                l / f
            );
        }
    }
}

/// The heading of a setup's table: where the processes ran, who created, which C.
fn describe(o: &Options, setup: Setup, pin: bool) -> String {
    match setup {
        Setup::Pinned => format!(
            "setup pinned: {}; the kernel process creates and waits on the executions in-process; C={}",
            if pin {
                "driver and kernel on CPU 0, agent on CPU 1 (taskset -c)"
            } else {
                "NOT pinned (--no-pin, no taskset or < 2 CPUs)"
            },
            o.c
        ),
        Setup::Deployed => format!(
            "setup deployed: nothing pinned; the driver creates and waits through rebuno::client::Client over HTTP (its wait polls, 50 ms doubling to 1 s: executions/s and replay steps/s are partly polling-bound); C={} (--c-deployed)",
            o.c_deployed
        ),
        Setup::Light => format!(
            "setup light (placed as pinned): {} executions started per second (--rate) offered to every agent, N={} each; the live workload",
            o.rate, o.n_light
        ),
        Setup::Remote => format!(
            "setup remote (placed as pinned): every kernel request and webhook through a loopback proxy that delays each answer {} ms (--delay-ms); C={}; the live workload",
            o.delay_ms, o.c
        ),
        Setup::Lambda => format!(
            "setup lambda (placed as pinned): one execution at a time (N={}), the agent on a current-thread runtime, the kernel remote ({} ms); the live workload",
            o.n_lambda, o.delay_ms
        ),
    }
}

/// A ratio column: `numerator / denominator`.
struct Ratio {
    label: String,
    numerator: Variant,
    denominator: Variant,
}

/// rust/python and rust/floor for every rust variant present (each against the floor on its
/// own runtime).
fn ratios(variants: &[Variant]) -> Vec<Ratio> {
    let mut ratios = Vec::new();
    for &rust in variants.iter().filter(|v| v.is_rust()) {
        for other in [Variant::Python, rust.floor_of()] {
            if variants.contains(&other) {
                ratios.push(Ratio {
                    label: format!("{}/{}", rust.name(), other.name()),
                    numerator: rust,
                    denominator: other,
                });
            }
        }
    }
    ratios
}

fn cell(value: f64, decimals: usize) -> String {
    if value.is_finite() {
        format!("{value:.decimals$}")
    } else {
        "-".to_owned()
    }
}

fn table(variants: &[Variant], medians: &Medians<'_>) {
    let ratios = ratios(variants);
    let width = ROWS
        .iter()
        .map(|r| r.label.chars().count())
        .max()
        .unwrap_or(0);
    let mut header = format!("| {:<width$} |", "figure");
    let mut rule = format!("|{:-<w$}|", "", w = width + 2);
    for name in variants
        .iter()
        .map(|v| v.name().to_owned())
        .chain(ratios.iter().map(|r| r.label.clone()))
    {
        header.push_str(&format!(" {name:>10} |"));
        rule.push_str(&format!("{:-<w$}:|", "", w = name.len().max(10) + 1));
    }
    println!("{header} target |");
    println!("{rule}--------|");
    for row in ROWS {
        let values: Vec<f64> = variants
            .iter()
            .map(|v| medians.get(*v, row.metric) * row.scale)
            .collect();
        if values.iter().all(|v| !v.is_finite()) {
            continue;
        }
        let mut line = format!("| {:<width$} |", row.label);
        for (value, variant) in values.iter().zip(variants) {
            let w = variant.name().len().max(10);
            line.push_str(&format!(" {:>w$} |", cell(*value, row.decimals)));
        }
        for ratio in &ratios {
            let r = medians.get(ratio.numerator, row.metric)
                / medians.get(ratio.denominator, row.metric);
            let w = ratio.label.len().max(10);
            line.push_str(&format!(" {:>w$} |", cell(r, 3)));
        }
        println!("{line} {} |", row.target);
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

fn targets(o: &Options, variants: &[Variant], m: &Medians<'_>) {
    let setup = m.setup.name();
    for rust in variants.iter().copied().filter(|v| v.is_rust()) {
        cpu_targets(m, rust);
    }
    let (re, pe) = (
        m.get(Variant::Rust, "live_execs_per_s"),
        m.get(Variant::Python, "live_execs_per_s"),
    );
    if re.is_finite() && pe.is_finite() {
        println!(
            "[{setup}] target executions/s ≥ 20× python: {:.1}×: {}",
            re / pe,
            verdict(re >= 20.0 * pe)
        );
    }
    let ack = m.get(Variant::Rust, "ack_p99_ms");
    if ack.is_finite() {
        println!(
            "[{setup}] target ack p99 ≤ 2 ms at {}/s: {ack:.3} ms: {}",
            o.ack_rate,
            verdict(ack <= 2.0)
        );
    }
    for (metric, what) in [
        ("idle_paced_bytes_per_exec", " (paced)"),
        ("idle_bytes_per_exec", ""),
    ] {
        let bytes = m.get(Variant::Rust, metric);
        if bytes.is_finite() {
            println!(
                "[{setup}] target ≤ 10 KB per idle in-flight execution{what}: {:.2} KB: {}",
                bytes / 1e3,
                verdict(bytes <= 10_000.0)
            );
        }
    }
}

/// Agent CPU per live and replayed step of `rust` against python's and its floor's.
fn cpu_targets(m: &Medians<'_>, rust: Variant) {
    let setup = m.setup.name();
    let (name, floor) = (rust.name(), rust.floor_of());
    for (metric, what) in [
        ("live_cpu_us_per_step", "live"),
        ("replay_cpu_us_per_step", "replayed"),
    ] {
        let (rc, pc, fc) = (
            m.get(rust, metric),
            m.get(Variant::Python, metric),
            m.get(floor, metric),
        );
        if rc.is_finite() && pc.is_finite() {
            println!(
                "[{setup}] target agent CPU/{what} step ≤ 1/30 python: {name}/python = 1/{:.1}: {}",
                pc / rc,
                verdict(rc * 30.0 <= pc)
            );
        }
        if rc.is_finite() && fc.is_finite() {
            println!(
                "[{setup}] target agent CPU/{what} step ≤ 1.1× floor: {name}/{} = {:.2}×: {}",
                floor.name(),
                rc / fc,
                verdict(rc <= 1.1 * fc)
            );
        }
    }
}

/// The 1, 5 and 15 minute load averages (other work on the machine skews every figure).
pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}
