//! The scale curves as Markdown tables on stdout, one table per curve that was run.

use super::{BODY_K, C, Key, Report};

/// Prints a table for each curve that has figures.
pub(super) fn print(report: &Report) {
    steps(report);
    bodies(report);
    idle(report);
    fanout(report);
}

/// The x values measured for `curve`, ascending.
fn xs(report: &Report, curve: &str) -> Vec<u64> {
    let mut xs: Vec<u64> = report
        .figures
        .keys()
        .filter(|(c, _, _)| *c == curve)
        .map(|(_, _, x)| *x)
        .collect();
    xs.sort_unstable();
    xs.dedup();
    xs
}

/// A figure with `decimals` decimals, `-` when it was not measured.
fn cell(value: f64, decimals: usize) -> String {
    if value.is_finite() {
        format!("{value:.decimals$}")
    } else {
        "-".to_owned()
    }
}

/// A body size in KiB or MiB.
fn human(size: u64) -> String {
    if size >= 1 << 20 {
        format!("{} MiB", size >> 20)
    } else {
        format!("{} KiB", size >> 10)
    }
}

fn steps(report: &Report) {
    let ks = xs(report, "steps");
    if ks.is_empty() {
        return;
    }
    let g = |series, k, metric| report.get(("steps", series, k), metric);
    println!("### Steps per execution (C = {C} in flight; kernel = the driver process)\n");
    println!(
        "| K | N | agent CPU/step live (µs) | replayed (µs) | wall/step live (ms) | replayed (ms) | kernel CPU/step live (µs) | replayed (µs) | agent allocs/step live / replayed | agent peak RSS (MiB) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for k in ks {
        println!(
            "| {k} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} |",
            cell(g("live", k, "n"), 0),
            cell(g("live", k, "agent_cpu_us_per_step"), 1),
            cell(g("replay", k, "agent_cpu_us_per_step"), 1),
            cell(g("live", k, "wall_ms_per_step"), 3),
            cell(g("replay", k, "wall_ms_per_step"), 3),
            cell(g("live", k, "kernel_cpu_us_per_step"), 1),
            cell(g("replay", k, "kernel_cpu_us_per_step"), 1),
            cell(g("live", k, "allocs_per_step"), 1),
            cell(g("replay", k, "allocs_per_step"), 1),
            cell(g("live", k, "peak_rss_kib") / 1024.0, 1),
        );
    }
    println!();
}

fn bodies(report: &Report) {
    let sizes = xs(report, "bodies");
    if sizes.is_empty() {
        return;
    }
    println!(
        "### Body sizes (K = {BODY_K} steps per execution, 1 in flight; fresh agent per point, another for the replay)\n"
    );
    println!(
        "| S | series | N·K | agent CPU/step (µs) | ns/byte | wall/step (ms) | kernel CPU/step (µs) | peak RSS (MiB) | (peak − base)/S | allocated bytes/S per step |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for size in sizes {
        for series in ["tool", "tool_replay", "llm", "llm_replay"] {
            let key = ("bodies", series, size);
            if report.figures.contains_key(&key) {
                body_row(report, key);
            }
        }
    }
    println!();
}

fn body_row(report: &Report, key: Key) {
    let (_, series, size) = key;
    if report.get(key, "failed") > 0.0 {
        println!(
            "| {} | {series} | failed (see the notes) ||||||||",
            human(size)
        );
        return;
    }
    println!(
        "| {} | {series} | {} | {} | {} | {} | {} | {} | {} | {} |",
        human(size),
        cell(report.get(key, "n") * BODY_K as f64, 0),
        cell(report.get(key, "agent_cpu_us_per_step"), 0),
        cell(report.get(key, "ns_per_byte"), 2),
        cell(report.get(key, "wall_ms_per_step"), 2),
        cell(report.get(key, "kernel_cpu_us_per_step"), 0),
        cell(report.get(key, "peak_hwm_kib") / 1024.0, 1),
        cell(report.get(key, "extra_peak_per_byte"), 2),
        cell(report.get(key, "alloc_bytes_per_byte"), 1),
    );
}

fn idle(report: &Report) {
    let ms = xs(report, "idle");
    if ms.is_empty() {
        return;
    }
    println!("### Executions waiting in a tool, all started at once\n");
    println!(
        "| M | waiting | RSS/execution (KB) | heap in use/execution (KB) | agent fds/execution | 7 s later: RSS/execution (KB) | heap in use (KB) | fds/execution | kernel fds/execution (then, 7 s later) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for m in ms {
        let g = |metric| report.get(("idle", "at_once", m), metric);
        println!(
            "| {m} | {} | {} | {} | {} | {} | {} | {} | {} / {} |",
            cell(g("reached"), 0),
            cell(g("rss_bytes_per_exec") / 1e3, 2),
            cell(g("heap_bytes_per_exec") / 1e3, 2),
            cell(g("fds_per_exec"), 2),
            cell(g("settled_rss_bytes_per_exec") / 1e3, 2),
            cell(g("settled_heap_bytes_per_exec") / 1e3, 2),
            cell(g("settled_fds_per_exec"), 2),
            cell(g("kernel_fds_per_exec"), 2),
            cell(g("settled_kernel_fds_per_exec"), 2),
        );
    }
    println!();
}

fn fanout(report: &Report) {
    let fs = xs(report, "fanout");
    if fs.is_empty() {
        return;
    }
    let g = |series, f, metric| report.get(("fanout", series, f), metric);
    println!("### Concurrent tool calls inside one execution (C = {C} executions in flight)\n");
    println!(
        "| F | N | completed live / replayed | agent CPU/step live (µs) | replayed (µs) | wall/execution live (ms) | replayed (ms) | kernel CPU/step live (µs) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for f in fs {
        println!(
            "| {f} | {} | {} / {} | {} | {} | {} | {} | {} |",
            cell(g("live", f, "n"), 0),
            cell(g("live", f, "completed"), 0),
            cell(g("replay", f, "completed"), 0),
            cell(g("live", f, "agent_cpu_us_per_step"), 1),
            cell(g("replay", f, "agent_cpu_us_per_step"), 1),
            cell(g("live", f, "wall_ms_per_exec"), 2),
            cell(g("replay", f, "wall_ms_per_exec"), 2),
            cell(g("live", f, "kernel_cpu_us_per_step"), 1),
        );
    }
    println!();
}
