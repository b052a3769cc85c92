//! `rebuno-bench scale`: how the rust agent's cost grows with the work (tools/bench/SCALE.md).
//!
//! ```text
//! rebuno-bench scale [--quick] [--only steps|bodies|idle|fanout] [--points LIST]
//!                    [--csv PATH] [--json PATH] [--no-pin] [--agent-prefix S]
//! ```
//!
//! Four curves, each point with a fresh agent process (the `agent` role, pinned to CPU 1) and a
//! fresh in-process [`DevKernel`] in this driver (pinned to CPU 0), so "kernel CPU" below is
//! this driver process's CPU time (the kernel, the execution creates and waits, and the LLM
//! stub of the `bodies` curve):
//!
//! - `steps`: K no-op tool steps per execution, live and replayed (held, then re-delivered);
//! - `bodies`: a tool result, or an LLM response body, of S bytes: CPU per step, and peak RSS
//!   of a fresh agent process (the replay gets another fresh process);
//! - `idle`: M executions started at once, each waiting in a tool: RSS and fds per execution;
//! - `fanout`: F concurrent tool calls inside one execution, live and replayed.
//!
//! It prints a markdown table per curve and writes every figure as CSV (`curve,series,x,metric,
//! value`) for `scripts/plot-scale.py`.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rebuno::wire::ExecutionStatus;
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};

use crate::kernel::AGENT_ID;
use crate::proc::{cpu_seconds, open_fds, peak_rss_kib, rss_kib};
use crate::stats::median;

mod tables;

const USAGE: &str = "\
rebuno-bench scale [OPTIONS]

Curves (default: all four):
  steps    K = 10, 100, 1000, 10000 no-op tool steps per execution, live and replayed
  bodies   a tool result / an LLM response body of S = 1 KB .. 4 MB (CPU, peak RSS)
  idle     M = 1000, 10000 executions started at once, each waiting in a tool
  fanout   F = 1, 10, 100 concurrent tool calls inside one execution, live and replayed

Options:
  --quick           about a tenth of the steps per point (a smoke run; CPU figures coarse)
  --only CURVE      one curve (steps, bodies, idle, fanout)
  --points LIST     comma list of x values to run (e.g. --points 10,1000)
  --csv PATH        figures as CSV (default target/scale.csv)
  --json PATH       figures also as JSON
  --no-pin          do not pin (default: driver+kernel on CPU 0, agent on CPU 1)
  --agent-prefix S  words before the agent's command, e.g.
                    \"valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p --\"
";

const SECRET: &str = "bench-secret";
/// Upper bound of any single wait.
const WAIT: Duration = Duration::from_secs(300);

#[derive(Debug, Clone)]
struct Opts {
    quick: bool,
    only: Option<String>,
    points: Option<Vec<u64>>,
    csv: PathBuf,
    json: Option<PathBuf>,
    pin: bool,
    prefix: Vec<String>,
}

impl Opts {
    fn parse(args: &[String]) -> Result<Self> {
        let mut opts = Self {
            quick: false,
            only: None,
            points: None,
            csv: PathBuf::from("target/scale.csv"),
            json: None,
            pin: true,
            prefix: Vec::new(),
        };
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            let mut value = |name: &str| {
                rest.next()
                    .cloned()
                    .ok_or_else(|| anyhow!("{name} needs a value"))
            };
            match arg.as_str() {
                "--quick" => opts.quick = true,
                "--only" => {
                    let curve = value(arg)?;
                    if !["steps", "bodies", "idle", "fanout"].contains(&curve.as_str()) {
                        bail!("unknown curve {curve:?}\n\n{USAGE}");
                    }
                    opts.only = Some(curve);
                }
                "--points" => {
                    opts.points = Some(
                        value(arg)?
                            .split(',')
                            .map(|p| p.trim().parse::<u64>().context("--points"))
                            .collect::<Result<_>>()?,
                    );
                }
                "--csv" => opts.csv = PathBuf::from(value(arg)?),
                "--json" => opts.json = Some(PathBuf::from(value(arg)?)),
                "--no-pin" => opts.pin = false,
                "--agent-prefix" => {
                    opts.prefix = value(arg)?.split_whitespace().map(str::to_owned).collect();
                }
                "-h" | "--help" => {
                    println!("{USAGE}");
                    std::process::exit(0);
                }
                other => bail!("unknown argument {other:?}\n\n{USAGE}"),
            }
        }
        Ok(opts)
    }

    fn wants(&self, curve: &str) -> bool {
        self.only.as_deref().is_none_or(|only| only == curve)
    }

    fn point(&self, x: u64) -> bool {
        self.points.as_ref().is_none_or(|p| p.contains(&x))
    }

    /// Steps per point, `full` normally and a tenth with `--quick`.
    fn budget(&self, full: u64) -> u64 {
        if self.quick { full / 10 } else { full }
    }
}

/// The key of one point's figures: curve, series, x.
type Key = (&'static str, &'static str, u64);
/// One point's figures: (curve, series, x) → metric → value.
type Figures = BTreeMap<Key, BTreeMap<&'static str, f64>>;

struct Report {
    figures: Figures,
    notes: Vec<String>,
}

impl Report {
    fn put(&mut self, key: Key, metric: &'static str, value: f64) {
        self.figures.entry(key).or_default().insert(metric, value);
    }

    fn get(&self, key: Key, metric: &str) -> f64 {
        self.figures
            .get(&key)
            .and_then(|m| m.get(metric))
            .copied()
            .unwrap_or(f64::NAN)
    }

    fn note(&mut self, note: String) {
        eprintln!("note: {note}");
        self.notes.push(note);
    }
}

/// Runs the scale curves and prints their tables.
pub(crate) async fn run(args: &[String]) -> Result<()> {
    let opts = Opts::parse(args)?;
    let started = Instant::now();
    let load_before = crate::report::loadavg();
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let pin = opts.pin && cpus >= 2 && which("taskset");
    if pin {
        let status = std::process::Command::new("taskset")
            .args(["-a", "-p", "-c", "0", &std::process::id().to_string()])
            .stdout(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("taskset could not pin the driver");
        }
    }
    let env = Env { opts, pin };
    let mut report = Report {
        figures: Figures::new(),
        notes: Vec::new(),
    };
    if env.opts.wants("steps") {
        env.steps(&mut report).await?;
    }
    if env.opts.wants("bodies") {
        env.bodies(&mut report).await?;
    }
    if env.opts.wants("idle") {
        env.idle(&mut report).await?;
    }
    if env.opts.wants("fanout") {
        env.fanout(&mut report).await?;
    }
    println!(
        "\nrebuno-bench scale: {cpus} CPUs, pinned: {pin}, quick: {}; took {:.0} s; load average before {load_before}, after {}\n",
        env.opts.quick,
        started.elapsed().as_secs_f64(),
        crate::report::loadavg()
    );
    tables::print(&report);
    for note in &report.notes {
        println!("note: {note}");
    }
    write_outputs(&env.opts, &report)?;
    Ok(())
}

struct Env {
    opts: Opts,
    pin: bool,
}

/// A kernel in this process and an agent process registered with it.
struct World {
    kernel: DevKernel,
    agent: Agent,
}

/// The agent process.
struct Agent {
    child: Child,
    pid: u32,
    /// Lines the agent printed after its webhook URL (answers to `stats`).
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
}

impl Agent {
    fn cpu(&self) -> Result<f64> {
        cpu_seconds(self.pid)
    }

    /// The agent's allocation counters, asked over its stdin (`stats`, answered
    /// `{"allocs":N,"bytes":B,"in_use":U}`); `None` if it does not answer.
    async fn stats(&mut self) -> Option<Value> {
        use tokio::io::AsyncWriteExt as _;
        let stdin = self.child.stdin.as_mut()?;
        stdin.write_all(b"stats\n").await.ok()?;
        stdin.flush().await.ok()?;
        let line = tokio::time::timeout(Duration::from_secs(10), self.lines.recv())
            .await
            .ok()??;
        serde_json::from_str(&line).ok()
    }

    /// Allocations and bytes allocated so far (see [`Agent::stats`]).
    async fn allocs(&mut self) -> Allocs {
        let stats = self.stats().await?;
        Some((stats["allocs"].as_f64()?, stats["bytes"].as_f64()?))
    }

    /// Heap bytes allocated and not freed (see [`Agent::stats`]).
    async fn in_use(&mut self) -> Option<f64> {
        self.stats().await?["in_use"].as_f64()
    }

    /// Closes its stdin (it exits on that, so a profiler prefix writes its data), waits, kills.
    async fn stop(mut self) {
        drop(self.child.stdin.take());
        if tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// CPU seconds of this driver process (the in-process kernel).
fn own_cpu() -> Result<f64> {
    cpu_seconds(std::process::id())
}

impl Env {
    /// Starts an agent process against `kernel` and registers its webhook.
    async fn agent(&self, kernel: &DevKernel) -> Result<Agent> {
        let exe = std::env::current_exe()?;
        let mut words: Vec<std::ffi::OsString> = Vec::new();
        if self.pin {
            words.extend(["taskset".into(), "-c".into(), "1".into()]);
        }
        words.extend(self.opts.prefix.iter().map(Into::into));
        words.push(exe.into());
        let mut child = Command::new(&words[0])
            .args(&words[1..])
            .args(["agent", &kernel.url(), SECRET])
            .kill_on_drop(true)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting the agent process")?;
        let pid = child.id().context("agent pid")?;
        let stdout = child.stdout.take().context("agent stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let url = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .context("agent start timed out")??
            .ok_or_else(|| anyhow!("the agent process exited at start"))?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = tx.send(line);
            }
        });
        kernel.register_agent(AgentSpec::new(AGENT_ID, url, SECRET))?;
        Ok(Agent {
            child,
            pid,
            lines: rx,
        })
    }

    /// A fresh kernel and agent, warmed up with `warm` (20 executions, 4 at a time).
    async fn world(&self, warm: Value) -> Result<World> {
        let kernel = DevKernel::builder()
            .start()
            .await
            .context("starting the dev kernel")?;
        let agent = self.agent(&kernel).await?;
        let world = World { kernel, agent };
        let done = live(&world.kernel, 20, 4, &warm).await?;
        done.check("warm-up")?;
        Ok(world)
    }
}

impl World {
    async fn stop(self) {
        self.agent.stop().await;
        self.kernel.shutdown().await;
    }
}

/// The outcome of a batch of executions.
#[derive(Debug, Default)]
struct Batch {
    /// Wall-clock seconds of the whole batch.
    elapsed_s: f64,
    /// Wall-clock seconds of each completed execution (create or re-delivery to terminal).
    walls: Vec<f64>,
    failed: usize,
    first_failure: Option<String>,
}

impl Batch {
    fn completed(&self) -> usize {
        self.walls.len()
    }

    fn check(&self, what: &str) -> Result<()> {
        if self.failed > 0 {
            bail!(
                "{what}: {} executions failed, e.g. {}",
                self.failed,
                self.first_failure.clone().unwrap_or_default()
            );
        }
        Ok(())
    }

    fn wall_median_ms(&self) -> f64 {
        median(self.walls.iter().map(|s| s * 1e3))
    }
}

/// Runs `n` jobs, `c` at a time: `job(i)` returns the execution's wall time or why it failed.
async fn batch<F, Fut>(n: usize, c: usize, job: F) -> Batch
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = std::result::Result<f64, String>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let outcomes = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..c.clamp(1, n.max(1)) {
        let (next, outcomes, job) = (next.clone(), outcomes.clone(), job.clone());
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let outcome = job(i).await;
                lock(&outcomes).push(outcome);
            }
        }));
    }
    for worker in workers {
        let _ = worker.await;
    }
    let mut done = Batch {
        elapsed_s: started.elapsed().as_secs_f64(),
        ..Batch::default()
    };
    for outcome in std::mem::take(&mut *lock(&outcomes)) {
        match outcome {
            Ok(wall) => done.walls.push(wall),
            Err(error) => {
                done.failed += 1;
                done.first_failure.get_or_insert(error);
            }
        }
    }
    done
}

/// Waits for `id` to end; its wall time since `t0`, or why it did not complete.
async fn finish(kernel: &DevKernel, id: &str, t0: Instant) -> std::result::Result<f64, String> {
    match kernel.wait_terminal(id, WAIT).await {
        Ok(done) if done.status == ExecutionStatus::Completed => Ok(t0.elapsed().as_secs_f64()),
        Ok(done) => Err(format!(
            "{id}: {} {}",
            done.status.as_str(),
            done.failure_reason
        )),
        Err(error) => Err(format!("{id}: {error}")),
    }
}

/// `n` executions of `input`, `c` at a time, each to its end.
async fn live(kernel: &DevKernel, n: usize, c: usize, input: &Value) -> Result<Batch> {
    let (kernel, input) = (kernel.clone(), input.clone());
    Ok(batch(n, c, move |_| {
        let (kernel, input) = (kernel.clone(), input.clone());
        async move {
            let t0 = Instant::now();
            let created = kernel
                .create_execution(NewExecution::new(AGENT_ID, input))
                .await
                .map_err(|e| e.to_string())?;
            finish(&kernel, &created.id, t0).await
        }
    })
    .await)
}

/// `n` executions of a `*_hold` `input`, `c` at a time, each until it has recorded `k`
/// succeeded steps (and waits forever in its first attempt). Returns their ids.
async fn hold(
    kernel: &DevKernel,
    n: usize,
    k: usize,
    c: usize,
    input: &Value,
) -> Result<Vec<String>> {
    let started = Instant::now();
    // Each poll copies the steps: poll long executions less often.
    let every = Duration::from_micros((2_000 + 10 * k as u64).min(100_000));
    let (mut pending, mut held) = (Vec::new(), Vec::with_capacity(n));
    let mut created = 0;
    while created < n || !pending.is_empty() {
        while created < n && pending.len() < c.max(1) {
            let execution = kernel
                .create_execution(NewExecution::new(AGENT_ID, input.clone()))
                .await?;
            pending.push(execution.id);
            created += 1;
        }
        tokio::time::sleep(every).await;
        let mut still = Vec::with_capacity(pending.len());
        for id in pending {
            let succeeded = kernel
                .steps(&id)
                .iter()
                .filter(|step| step.status == "succeeded")
                .count();
            if succeeded >= k {
                held.push(id);
            } else if let Some(e) = kernel.execution(&id).filter(|e| e.status.is_terminal()) {
                bail!(
                    "held execution {id} ended before re-delivery: {} {}",
                    e.status.as_str(),
                    e.failure_reason
                );
            } else {
                still.push(id);
            }
        }
        pending = still;
        if started.elapsed() > WAIT {
            bail!("{} executions did not record their steps", pending.len());
        }
    }
    Ok(held)
}

/// Re-delivers `ids`, `c` at a time, each to its end (every recorded step replays).
async fn redeliver(kernel: &DevKernel, ids: Vec<String>, c: usize) -> Batch {
    let (kernel, ids) = (kernel.clone(), Arc::new(ids));
    batch(ids.len(), c, move |i| {
        let (kernel, ids) = (kernel.clone(), ids.clone());
        async move {
            let id = &ids[i];
            let t0 = Instant::now();
            kernel.redeliver(id).map_err(|e| e.to_string())?;
            finish(&kernel, id, t0).await
        }
    })
    .await
}

/// Agent and kernel CPU seconds around `work`.
async fn measured<T>(
    agent: &Agent,
    work: impl std::future::Future<Output = Result<T>>,
) -> Result<(T, f64, f64)> {
    let (a0, k0) = (agent.cpu()?, own_cpu()?);
    let out = work.await?;
    let (a1, k1) = (agent.cpu()?, own_cpu()?);
    Ok((out, a1 - a0, k1 - k0))
}

/// An [`Agent::allocs`] reading.
type Allocs = Option<(f64, f64)>;

/// Records the allocations between two [`Agent::allocs`] readings, per step (and per byte of
/// `size` when given).
fn put_allocs(
    report: &mut Report,
    key: Key,
    (before, after): (Allocs, Allocs),
    steps: f64,
    size: Option<u64>,
) {
    let (Some((n0, b0)), Some((n1, b1))) = (before, after) else {
        return;
    };
    report.put(key, "allocs_per_step", (n1 - n0) / steps);
    report.put(key, "alloc_bytes_per_step", (b1 - b0) / steps);
    if let Some(size) = size {
        report.put(key, "alloc_bytes_per_byte", (b1 - b0) / steps / size as f64);
    }
}

// ---------------------------------------------------------------------------------------------
// Curve 1: steps per execution.

const STEPS_K: [u64; 4] = [10, 100, 1_000, 10_000];
/// Executions in flight in the steps and fan-out curves.
const C: usize = 4;

impl Env {
    async fn steps(&self, report: &mut Report) -> Result<()> {
        for k in STEPS_K.into_iter().filter(|k| self.opts.point(*k)) {
            let n = (self.opts.budget(20_000) / k).max(4) as usize;
            eprintln!("steps: K = {k}, N = {n}");
            let mut world = self.world(json!({"k": 10, "mode": "live"})).await?;
            let input = json!({"k": k, "mode": "live"});
            let work = live(&world.kernel, n, C, &input);
            let done = phase(&mut world.agent, "steps live", work).await?;
            done.put_steps(report, ("steps", "live", k), n);
            let hold_input = json!({"k": k, "mode": "hold"});
            let ids = hold(&world.kernel, n, k as usize, C, &hold_input).await?;
            let work = async { Ok(redeliver(&world.kernel, ids, C).await) };
            let done = phase(&mut world.agent, "steps replay", work).await?;
            done.put_steps(report, ("steps", "replay", k), n);
            let peak = peak_rss_kib(world.agent.pid)? as f64;
            report.put(("steps", "live", k), "peak_rss_kib", peak);
            world.stop().await;
        }
        Ok(())
    }
}

/// A batch of executions run while the agent was measured.
struct Phase {
    done: Batch,
    /// Agent and kernel CPU seconds over the batch.
    cpu_s: (f64, f64),
    /// The agent's allocation counters before and after.
    allocs: (Allocs, Allocs),
}

/// Runs `work` (a batch, failing if any execution in it failed) while measuring the agent.
async fn phase(
    agent: &mut Agent,
    label: &str,
    work: impl std::future::Future<Output = Result<Batch>>,
) -> Result<Phase> {
    let before = agent.allocs().await;
    let (done, cpu, kcpu) = measured(agent, work).await?;
    let after = agent.allocs().await;
    done.check(label)?;
    let (cpu_s, allocs) = ((cpu, kcpu), (before, after));
    Ok(Phase {
        done,
        cpu_s,
        allocs,
    })
}

impl Phase {
    /// Records a steps-curve point of `n` executions of `key.2` steps each, and prints it.
    fn put_steps(&self, report: &mut Report, key: Key, n: usize) {
        let k = key.2 as f64;
        let steps = n as f64 * k;
        let (cpu, kcpu) = self.cpu_s;
        let wall_ms = self.done.wall_median_ms() / k;
        put_allocs(report, key, self.allocs, steps, None);
        report.put(key, "n", n as f64);
        report.put(key, "agent_cpu_us_per_step", cpu * 1e6 / steps);
        report.put(key, "kernel_cpu_us_per_step", kcpu * 1e6 / steps);
        report.put(key, "wall_ms_per_step", wall_ms);
        report.put(key, "steps_per_s", steps / self.done.elapsed_s);
        report.put(key, "agent_cpu_s", cpu);
        eprintln!(
            "  {}: {:.1} µs agent CPU/step, {:.1} kernel, {wall_ms:.3} ms/step",
            key.1,
            cpu * 1e6 / steps,
            kcpu * 1e6 / steps,
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Curve 2: body sizes.

const SIZES: [u64; 5] = [1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20];
/// Steps per execution in the bodies curve.
const BODY_K: usize = 4;

impl Env {
    async fn bodies(&self, report: &mut Report) -> Result<()> {
        for size in SIZES.into_iter().filter(|s| self.opts.point(*s)) {
            // About 256 MiB of payload per point, between 32 and 4,000 steps.
            let steps = (self.opts.budget(2_560) * 100_000 / size).clamp(32, 4_000) as usize;
            let n = (steps / BODY_K).max(2);
            for series in ["tool", "llm"] {
                eprintln!("bodies: {series}, S = {size}, N = {n} x K = {BODY_K}");
                if let Err(error) = self.body_point(series, size, n, report).await {
                    report.note(format!("bodies {series} S={size}: {error:#}"));
                    report.put(("bodies", series, size), "failed", 1.0);
                }
            }
        }
        Ok(())
    }

    async fn body_point(
        &self,
        series: &'static str,
        size: u64,
        n: usize,
        report: &mut Report,
    ) -> Result<()> {
        let stub = big_stub(size as usize).await?;
        let (mode, hold_mode, replay_series, warm) = if series == "tool" {
            let warm = json!({"k": 1, "mode": "big", "size": 16});
            ("big", "big_hold", "tool_replay", warm)
        } else {
            let small = big_stub(16).await?;
            let warm = json!({"k": 1, "mode": "llm", "llm_url": small});
            ("llm", "llm_hold", "llm_replay", warm)
        };
        let input = |mode: &str| json!({"k": BODY_K, "mode": mode, "size": size, "llm_url": stub});
        let mut world = self.world(warm.clone()).await?;
        let phase = BodyPhase {
            label: "live",
            key: ("bodies", series, size),
            n,
        };
        let live_input = input(mode);
        let work = live(&world.kernel, n, 1, &live_input);
        phase.measure(&mut world.agent, work, report).await?;
        // Replay in a second fresh agent process: the first records the steps and waits, is
        // stopped, and the new one (registered in its place) replays them on re-delivery.
        let ids = hold(&world.kernel, n, BODY_K, 1, &input(hold_mode)).await?;
        let World { kernel, agent } = world;
        agent.stop().await;
        let mut agent = self.agent(&kernel).await?;
        let warm_done = live(&kernel, 20, 4, &warm).await?;
        warm_done.check("replay warm-up")?;
        let phase = BodyPhase {
            label: "replay",
            key: ("bodies", replay_series, size),
            n,
        };
        let work = async { Ok(redeliver(&kernel, ids, 1).await) };
        phase.measure(&mut agent, work, report).await?;
        agent.stop().await;
        kernel.shutdown().await;
        Ok(())
    }
}

/// One measured phase of a body-size point: `n` executions of `BODY_K` steps, live or replayed.
struct BodyPhase {
    label: &'static str,
    key: Key,
    n: usize,
}

impl BodyPhase {
    /// Runs `work` while measuring the agent (CPU, allocations, peak RSS) and records the figures.
    async fn measure(
        &self,
        agent: &mut Agent,
        work: impl std::future::Future<Output = Result<Batch>>,
        report: &mut Report,
    ) -> Result<()> {
        let size = self.key.2;
        let steps = (self.n * BODY_K) as f64;
        let base = peak_rss_kib(agent.pid)?;
        let done = phase(agent, self.label, work).await?;
        let peak = peak_rss_kib(agent.pid)?;
        put_allocs(report, self.key, done.allocs, steps, Some(size));
        let point = BodyPoint {
            n: self.n,
            steps,
            size,
            cpu_s: done.cpu_s,
            wall_ms: done.done.wall_median_ms(),
            hwm_kib: (base, peak),
        };
        let per_step = put_body_point(report, self.key, point);
        eprintln!(
            "  {}: {per_step:.0} µs/step ({:.2} ns/B), peak {peak} KiB (base {base}): {:.2} B/B",
            self.label,
            per_step * 1e3 / size as f64,
            (peak.saturating_sub(base) * 1024) as f64 / size as f64
        );
        Ok(())
    }
}

/// A chat-completions stub in this process whose answer's content is `size` bytes.
async fn big_stub(size: usize) -> Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/v1/chat/completions", listener.local_addr()?);
    let answer = json!({
        "id": "chatcmpl-scale",
        "object": "chat.completion",
        "created": 0,
        "model": "bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "x".repeat(size)},
            "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    });
    let answer = Bytes::from(serde_json::to_vec(&answer)?);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let answer = answer.clone();
                    async move {
                        let _ = request.into_body().collect().await;
                        let mut response = hyper::Response::new(Full::new(answer));
                        response.headers_mut().insert(
                            hyper::header::CONTENT_TYPE,
                            hyper::header::HeaderValue::from_static("application/json"),
                        );
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(url)
}

// ---------------------------------------------------------------------------------------------
// Curve 3: executions waiting at once.

const IDLE_M: [u64; 2] = [1_000, 10_000];
/// How long the idle executions wait before the settled figures: past rebuno-hyper's 5 s idle
/// timeout, so the webhook connections of the burst are closed by then.
const SETTLE: Duration = Duration::from_secs(7);

impl Env {
    async fn idle(&self, report: &mut Report) -> Result<()> {
        for m in IDLE_M.into_iter().filter(|m| self.opts.point(*m)) {
            eprintln!("idle: M = {m}");
            let mut world = self.world(json!({"k": 1, "mode": "live"})).await?;
            tokio::time::sleep(Duration::from_millis(300)).await;
            let key = ("idle", "at_once", m);
            let base = Sample::take(&mut world.agent).await?;
            let started = Instant::now();
            let reached = start_waiting(&world.kernel, m, report).await?;
            report.put(key, "reached", reached as f64);
            report.put(key, "start_s", started.elapsed().as_secs_f64());
            report.put(key, "peak_hwm_kib", peak_rss_kib(world.agent.pid)? as f64);
            eprint!(
                "  {reached} waiting after {:.1} s: ",
                started.elapsed().as_secs_f64()
            );
            quiet(world.agent.pid).await?;
            let now = Sample::take(&mut world.agent).await?;
            now.put_per_exec(&base, m, report, key, &AT_ONCE);
            tokio::time::sleep(SETTLE).await;
            eprint!("  {SETTLE:?} later: ");
            let settled = Sample::take(&mut world.agent).await?;
            settled.put_per_exec(&base, m, report, key, &SETTLED);
            world.stop().await;
        }
        Ok(())
    }
}

/// Starts `m` executions that each wait in a tool; returns how many were waiting when all were
/// or 120 s had passed (noting the shortfall).
async fn start_waiting(kernel: &DevKernel, m: u64, report: &mut Report) -> Result<usize> {
    let started = Instant::now();
    let mut ids = Vec::with_capacity(m as usize);
    for _ in 0..m {
        let input = json!({"k": 0, "mode": "idle"});
        let created = kernel
            .create_execution(NewExecution::new(AGENT_ID, input))
            .await?;
        ids.push(created.id);
    }
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let reached = ids.iter().filter(|id| waiting(kernel, id)).count();
        if reached == ids.len() {
            return Ok(reached);
        }
        if started.elapsed() > Duration::from_secs(120) {
            let failed = ids
                .iter()
                .filter_map(|id| kernel.execution(id))
                .filter(|e| e.status.is_terminal())
                .count();
            report.note(format!(
                "idle M={m}: only {reached} of {m} reached their tool within 120 s ({failed} ended)"
            ));
            return Ok(reached);
        }
    }
}

/// Waits (up to 6 s) for the agent's RSS to stop moving by more than 1% in 300 ms.
async fn quiet(pid: u32) -> Result<()> {
    let mut last = rss_kib(pid)?;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = rss_kib(pid)?;
        if now.abs_diff(last) * 100 <= last {
            break;
        }
        last = now;
    }
    Ok(())
}

/// The idle curve's per-execution metrics: RSS, heap in use, agent fds, kernel fds.
type Names = [&'static str; 4];
const AT_ONCE: Names = [
    "rss_bytes_per_exec",
    "heap_bytes_per_exec",
    "fds_per_exec",
    "kernel_fds_per_exec",
];
/// The same, `SETTLE` later.
const SETTLED: Names = [
    "settled_rss_bytes_per_exec",
    "settled_heap_bytes_per_exec",
    "settled_fds_per_exec",
    "settled_kernel_fds_per_exec",
];

/// What the agent and the kernel hold at one moment of the idle curve.
struct Sample {
    rss_kib: u64,
    fds: usize,
    kernel_fds: usize,
    /// The agent's heap in use (allocated, not freed), when it answers `stats`.
    heap: Option<f64>,
}

impl Sample {
    async fn take(agent: &mut Agent) -> Result<Self> {
        Ok(Self {
            rss_kib: rss_kib(agent.pid)?,
            fds: open_fds(agent.pid)?,
            kernel_fds: own_fds(),
            heap: agent.in_use().await,
        })
    }

    /// Records what each of `m` executions added since `base`, under `names` (RSS, heap, agent
    /// fds, kernel fds).
    fn put_per_exec(&self, base: &Sample, m: u64, report: &mut Report, key: Key, names: &Names) {
        let m = m as f64;
        let rss = (self.rss_kib.saturating_sub(base.rss_kib) * 1024) as f64 / m;
        let heap = match (self.heap, base.heap) {
            (Some(now), Some(then)) => (now - then) / m,
            _ => f64::NAN,
        };
        let fds = (self.fds as f64 - base.fds as f64) / m;
        let kernel_fds = (self.kernel_fds as f64 - base.kernel_fds as f64) / m;
        for (name, value) in names.iter().zip([rss, heap, fds, kernel_fds]) {
            report.put(key, name, value);
        }
        eprintln!(
            "RSS {} -> {} KiB ({rss:.0} B each, heap in use {heap:.0} B each), fds {} -> {}, kernel fds {} -> {}",
            base.rss_kib, self.rss_kib, base.fds, self.fds, base.kernel_fds, self.kernel_fds
        );
    }
}

/// Whether the execution's tool is executing.
fn waiting(kernel: &DevKernel, id: &str) -> bool {
    kernel
        .steps(id)
        .iter()
        .any(|step| step.status == "executing")
}

fn own_fds() -> usize {
    open_fds(std::process::id()).unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Curve 4: concurrent steps inside one execution.

const FAN_F: [u64; 3] = [1, 10, 100];

impl Env {
    async fn fanout(&self, report: &mut Report) -> Result<()> {
        for f in FAN_F.into_iter().filter(|f| self.opts.point(*f)) {
            let n = (self.opts.budget(20_000) / f).clamp(20, self.opts.budget(4_000)) as usize;
            let fu = f as usize;
            eprintln!("fanout: F = {f}, N = {n}");
            let world = self.world(json!({"k": f, "mode": "fan"})).await?;
            let input = json!({"k": f, "mode": "fan"});
            let (done, cpu, kcpu) = measured(&world.agent, async {
                live(&world.kernel, n, C, &input).await
            })
            .await?;
            let steps = (n * fu) as f64;
            let key = ("fanout", "live", f);
            put_fan(report, key, n, &done, cpu, kcpu, steps);
            eprintln!(
                "  live: {} of {n} completed, {:.1} µs agent CPU/step, {:.2} ms/execution",
                done.completed(),
                cpu * 1e6 / steps,
                done.wall_median_ms()
            );
            let ids = hold(
                &world.kernel,
                n,
                fu,
                C,
                &json!({"k": f, "mode": "fan_hold"}),
            )
            .await?;
            let (done, cpu, kcpu) = measured(&world.agent, async {
                Ok(redeliver(&world.kernel, ids, C).await)
            })
            .await?;
            let key = ("fanout", "replay", f);
            put_fan(report, key, n, &done, cpu, kcpu, steps);
            eprintln!(
                "  replay: {} of {n} completed, {:.1} µs agent CPU/step, {:.2} ms/execution",
                done.completed(),
                cpu * 1e6 / steps,
                done.wall_median_ms()
            );
            world.stop().await;
        }
        Ok(())
    }
}

fn put_fan(report: &mut Report, key: Key, n: usize, done: &Batch, cpu: f64, kcpu: f64, steps: f64) {
    report.put(key, "n", n as f64);
    report.put(key, "completed", done.completed() as f64);
    report.put(key, "failed", done.failed as f64);
    report.put(key, "agent_cpu_us_per_step", cpu * 1e6 / steps);
    report.put(key, "kernel_cpu_us_per_step", kcpu * 1e6 / steps);
    report.put(key, "wall_ms_per_exec", done.wall_median_ms());
    report.put(key, "steps_per_s", steps / done.elapsed_s);
    if let Some(failure) = &done.first_failure {
        eprintln!("  first failure: {failure}");
    }
}

fn write_outputs(opts: &Opts, report: &Report) -> Result<()> {
    let mut csv = String::from("curve,series,x,metric,value\n");
    for ((curve, series, x), metrics) in &report.figures {
        for (metric, value) in metrics {
            csv.push_str(&format!("{curve},{series},{x},{metric},{value}\n"));
        }
    }
    if let Some(dir) = opts.csv.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&opts.csv, csv).with_context(|| format!("writing {}", opts.csv.display()))?;
    eprintln!("wrote {}", opts.csv.display());
    if let Some(path) = &opts.json {
        let rows: Vec<Value> = report
            .figures
            .iter()
            .map(|((curve, series, x), metrics)| {
                json!({"curve": curve, "series": series, "x": x, "metrics": metrics})
            })
            .collect();
        let out = json!({"quick": opts.quick, "points": rows, "notes": report.notes});
        std::fs::write(path, serde_json::to_vec_pretty(&out)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn which(program: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// One body-size point's measurements, before they are divided into figures.
struct BodyPoint {
    n: usize,
    steps: f64,
    size: u64,
    /// Agent and kernel CPU seconds over the phase.
    cpu_s: (f64, f64),
    /// Median wall time of an execution.
    wall_ms: f64,
    /// The agent's `VmHWM` before and after the phase.
    hwm_kib: (u64, u64),
}

/// Records `point`'s figures under `key`; returns the agent's CPU µs per step.
fn put_body_point(report: &mut Report, key: Key, point: BodyPoint) -> f64 {
    let (cpu, kcpu) = point.cpu_s;
    let (base, peak) = point.hwm_kib;
    let size = point.size as f64;
    let per_step = cpu * 1e6 / point.steps;
    report.put(key, "n", point.n as f64);
    report.put(key, "agent_cpu_us_per_step", per_step);
    report.put(key, "ns_per_byte", per_step * 1e3 / size);
    report.put(key, "kernel_cpu_us_per_step", kcpu * 1e6 / point.steps);
    report.put(key, "wall_ms_per_step", point.wall_ms / BODY_K as f64);
    report.put(key, "base_hwm_kib", base as f64);
    report.put(key, "peak_hwm_kib", peak as f64);
    report.put(
        key,
        "extra_peak_per_byte",
        (peak.saturating_sub(base) * 1024) as f64 / size,
    );
    per_step
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
