#!/usr/bin/env python3
"""Plots the figures of `rebuno-bench scale` (its CSV: curve,series,x,metric,value).

    python3 scripts/plot-scale.py [target/scale.csv] [docs/bench/scale.png]

One panel per curve, log-scale x: agent CPU per step for the steps, bodies (per byte) and
fan-out curves, RSS per execution for the idle curve. Needs matplotlib
(`pip install --user matplotlib`).
"""

import csv
import math
import os
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    data = defaultdict(dict)  # (curve, series) -> metric -> {x: value}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            value = float(row["value"])
            if math.isnan(value):
                continue
            data[(row["curve"], row["series"])].setdefault(row["metric"], {})[
                int(row["x"])
            ] = value
    return data


def series(data, curve, name, metric):
    points = sorted(data.get((curve, name), {}).get(metric, {}).items())
    return [x for x, _ in points], [y for _, y in points]


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "target/scale.csv"
    out = sys.argv[2] if len(sys.argv) > 2 else "docs/bench/scale.png"
    data = load(src)
    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    (steps, bodies), (idle, fan) = axes

    for name, style in (("live", "o-"), ("replay", "s--")):
        xs, ys = series(data, "steps", name, "agent_cpu_us_per_step")
        if xs:
            steps.plot(xs, ys, style, label=f"agent, {name}")
        xs, ys = series(data, "steps", name, "kernel_cpu_us_per_step")
        if xs:
            steps.plot(xs, ys, style, alpha=0.4, label=f"dev kernel, {name}")
    steps.set_title("1. Steps per execution (flat = good)")
    steps.set_xlabel("K, no-op tool steps per execution")
    steps.set_ylabel("CPU per step (µs)")

    for name, style in (
        ("tool", "o-"),
        ("tool_replay", "s--"),
        ("llm", "^-"),
        ("llm_replay", "v--"),
    ):
        xs, ys = series(data, "bodies", name, "ns_per_byte")
        if xs:
            bodies.plot([x / 1024 for x in xs], ys, style, label=f"CPU, {name}")
        xs, ys = series(data, "bodies", name, "extra_peak_per_byte")
        if xs:
            bodies.plot(
                [x / 1024 for x in xs], ys, style, alpha=0.4, label=f"(peak−base)/S, {name}"
            )
    bodies.set_title("2. Body size S (linear = flat lines)")
    bodies.set_xlabel("S (KiB)")
    bodies.set_ylabel("agent CPU ns per byte; extra peak RSS bytes per byte")
    bodies.set_yscale("log")

    for metric, label in (
        ("rss_bytes_per_exec", "RSS, all waiting"),
        ("settled_rss_bytes_per_exec", "RSS, 7 s later"),
    ):
        xs, ys = series(data, "idle", "at_once", metric)
        if xs:
            idle.plot(xs, [y / 1e3 for y in ys], "o-", label=label)
    idle.axhline(10, color="grey", linestyle=":", label="target 10 KB")
    idle.set_title("3. Executions waiting in a tool at once")
    idle.set_xlabel("M, executions in flight")
    idle.set_ylabel("agent RSS per execution (KB)")

    for name, style in (("live", "o-"), ("replay", "s--")):
        xs, ys = series(data, "fanout", name, "agent_cpu_us_per_step")
        if xs:
            fan.plot(xs, ys, style, label=f"agent CPU/step, {name}")
    fan.set_title("4. Concurrent tool calls in one execution")
    fan.set_xlabel("F, concurrent calls (join_all)")
    fan.set_ylabel("agent CPU per step (µs)")

    for ax in axes.flat:
        ax.set_xscale("log")
        ax.set_ylim(bottom=0) if ax.get_yscale() == "linear" else None
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle("rebuno-rs: cost as the work grows (rebuno-bench scale)")
    fig.tight_layout()
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
