//! The driver: starts the processes, runs the workloads interleaved (setups and variants
//! rotating each repetition), prints the medians.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use rebuno::client::Client;
use serde_json::json;

use crate::control::{Request, RunReport};
use crate::deployed;
use crate::kernel::AGENT_ID;
use crate::measure::{
    Figures, Key, LIVE, LLM, LLM_REPLAY, LiveMetrics, LivePhase, PerStep, REPLAY, ReplayMetrics,
    Sample, record, record_live, record_replay, warn_provider_calls,
};
use crate::options::{Options, Setup, Variant};
use crate::proc::{open_fds, peak_rss_kib, rss_kib};
use crate::spawn::{KernelProc, Proc, SECRET, Spawner, own_cpus, pin_self, which};

/// Runs the benchmark and prints the report.
pub(crate) async fn run(options: Options) -> Result<()> {
    let started = Instant::now();
    let load_before = crate::report::loadavg();
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let wants_pin = options.pin && options.setups.iter().any(|s| s.is_pinned());
    let pin = wants_pin && cpus >= 2 && which("taskset");
    if wants_pin && !pin {
        eprintln!("note: not pinning (needs taskset and at least 2 CPUs)");
    }
    // The driver's own CPUs, restored for the deployed setup.
    let own = if pin { Some(own_cpus()?) } else { None };
    let python = if options.variants.contains(&Variant::Python)
        && (options.live || options.replay || options.idle || options.llm)
    {
        Some(crate::spawn::python(&options)?)
    } else {
        None
    };
    let mut figures = Figures::new();
    for rep in 0..options.reps {
        for setup in rotated(&options.setups, rep) {
            let env = Env::new(&options, setup, pin, python.clone());
            match &own {
                // The driver (and with it the ack sender) shares CPU 0 with the kernel.
                Some(_) if setup.is_pinned() => pin_self("0")?,
                Some(cpus) => pin_self(cpus)?,
                None => {}
            }
            env.repetition(rep, &mut figures).await?;
        }
    }
    crate::report::print(&options, pin, &figures, cpus, started.elapsed());
    println!(
        "load average before: {load_before}; after: {}",
        crate::report::loadavg()
    );
    if let Some(path) = &options.json {
        write_json(path, &figures)?;
    }
    Ok(())
}

/// `items` rotated left by `rep` (so each repetition starts with another one).
fn rotated<T: Clone>(items: &[T], rep: usize) -> Vec<T> {
    let mut order = items.to_vec();
    let turn = rep % order.len().max(1);
    order.rotate_left(turn);
    order
}

fn write_json(path: &PathBuf, figures: &Figures) -> Result<()> {
    let raw: BTreeMap<String, &Vec<f64>> = figures
        .iter()
        .map(|((setup, variant, metric), values)| {
            let key = format!("{}.{}.{metric}", setup.name(), variant.name());
            (key, values)
        })
        .collect();
    std::fs::write(path, serde_json::to_vec_pretty(&raw)?)
        .with_context(|| format!("writing {}", path.display()))
}

/// Everything a run in one setup needs.
struct Env {
    options: Options,
    setup: Setup,
    spawner: Spawner,
    /// Executions in flight in this setup.
    c: usize,
}

/// A fresh kernel and agent, registered and warmed up; `client` in the deployed setup.
struct World {
    kernel: KernelProc,
    agent: Proc,
    client: Option<Client>,
}

impl World {
    async fn stop(self) {
        self.kernel.quit().await;
        self.agent.stop().await;
    }
}

impl Env {
    fn new(options: &Options, setup: Setup, pin: bool, python: Option<PathBuf>) -> Self {
        let spawner = Spawner {
            pin: pin && setup.is_pinned(),
            prefix: options.agent_prefix.clone(),
            python,
        };
        Self {
            options: options.clone(),
            setup,
            spawner,
            c: options.c_of(setup),
        }
    }

    fn key(&self, variant: Variant) -> Key {
        (self.setup, variant)
    }

    /// One repetition of every workload asked for, variants rotated.
    async fn repetition(&self, rep: usize, figures: &mut Figures) -> Result<()> {
        let o = &self.options;
        if self.setup.live_only() {
            if !o.live {
                return Ok(());
            }
            for variant in rotated(&o.variants_of(self.setup), rep) {
                eprintln!(
                    "rep {}/{} {}: live {}",
                    rep + 1,
                    o.reps,
                    self.setup.name(),
                    variant.name()
                );
                self.live_replay(variant, false, figures).await?;
            }
            return Ok(());
        }
        let order = rotated(&o.variants, rep);
        let say = |workload: &str, variant: Variant| {
            eprintln!(
                "rep {}/{} {}: {workload} {}",
                rep + 1,
                o.reps,
                self.setup.name(),
                variant.name()
            );
        };
        if o.live || o.replay {
            for &variant in &order {
                say("live/replay", variant);
                self.live_replay(variant, false, figures).await?;
            }
        }
        for &variant in order.iter().filter(|v| o.idle && !v.is_floor()) {
            say("idle", variant);
            self.idle(variant, figures).await?;
        }
        for &variant in order.iter().filter(|v| o.llm && !v.is_floor()) {
            say("llm", variant);
            self.live_replay(variant, true, figures).await?;
        }
        for &variant in order.iter().filter(|v| o.ack && v.is_native()) {
            say("ack", variant);
            self.ack(variant, figures).await?;
        }
        Ok(())
    }

    /// Fresh kernel + agent, registered and warmed up with `warm` (a [`Request::Live`]: run by
    /// the kernel process when pinned, through the client when deployed).
    async fn world(&self, variant: Variant, warm: Request) -> Result<World> {
        let Request::Live { n, k, c, llm, .. } = warm else {
            bail!("the warm-up must be a live request");
        };
        let mut kernel = self.spawner.kernel().await?;
        let url = kernel.url.clone();
        let delay = self.options.delay_ms;
        // The agent reaches the kernel, and the kernel the agent, through the delaying proxy.
        let agent_side = match self.setup.is_remote() {
            true => kernel.proxy(&url, delay).await?,
            false => url.clone(),
        };
        let (agent, mut webhook) = self.spawner.agent(variant, &agent_side).await?;
        if self.setup.is_remote() {
            webhook = kernel.proxy(&webhook, delay).await?;
        }
        kernel
            .request(&Request::Register {
                agent_id: AGENT_ID.to_owned(),
                webhook_url: webhook,
                secret: SECRET.to_owned(),
            })
            .await?;
        let client = match self.setup {
            Setup::Pinned | Setup::Light | Setup::Remote | Setup::Lambda => {
                kernel.run(&warm).await.context("warm-up")?;
                None
            }
            Setup::Deployed => {
                let client = deployed::client(&url)?;
                let input = kernel.input(k, if llm { "llm" } else { "live" }).await?;
                deployed::live(&client, &input, n, c)
                    .await
                    .context("warm-up")?;
                Some(client)
            }
        };
        Ok(World {
            kernel,
            agent,
            client,
        })
    }

    /// Live and replay phases (tool calls, or LLM calls with `llm`) against one fresh world.
    async fn live_replay(&self, variant: Variant, llm: bool, figures: &mut Figures) -> Result<()> {
        let (k, c) = (self.options.k, self.c);
        let n = self.options.n_of(self.setup, variant);
        let warm = Request::Live {
            n: (2 * c).max(20),
            k,
            c,
            llm,
            rate: None,
        };
        let mut world = self.world(variant, warm).await?;
        let (live, replay): (&LiveMetrics, &ReplayMetrics) = if llm {
            (&LLM, &LLM_REPLAY)
        } else {
            (&LIVE, &REPLAY)
        };
        if llm || self.options.live {
            let phase = self.measure_live(&mut world, n, k, llm).await?;
            record_live(figures, self.key(variant), live, &phase);
            warn_provider_calls(phase.report.provider_calls, if llm { n * k } else { 0 });
        }
        if llm || (self.options.replay && !self.setup.live_only()) {
            let held = world.kernel.wait(&Request::Hold { n, k, c, llm }).await?;
            let (report, cost) = self.measure_replay(&mut world, &held.ids, k).await?;
            record_replay(figures, self.key(variant), replay, &report, &cost);
            warn_provider_calls(report.provider_calls, 0);
        }
        world.stop().await;
        Ok(())
    }

    /// `n` live executions of `k` steps, `c` in flight, created by the kernel process (pinned)
    /// or through the client (deployed).
    async fn measure_live(
        &self,
        world: &mut World,
        n: usize,
        k: usize,
        llm: bool,
    ) -> Result<LivePhase> {
        let c = self.c;
        let rate = (self.setup == Setup::Light).then_some(self.options.rate);
        let World {
            kernel,
            agent,
            client,
        } = world;
        let calls = kernel.provider_calls().await?;
        let before = Sample::take(agent, &kernel.proc).await?;
        let (mut report, ids) = match client {
            None => (
                kernel.run(&Request::Live { n, k, c, llm, rate }).await?,
                Vec::new(),
            ),
            Some(client) => {
                let input = kernel.input(k, if llm { "llm" } else { "live" }).await?;
                deployed::live(client, &input, n, c).await?
            }
        };
        let after = Sample::take(agent, &kernel.proc).await?;
        report.provider_calls = kernel.provider_calls().await? - calls;
        if let Some(client) = client {
            deployed::step_gaps(client, &ids, c, &mut report).await?;
        }
        Ok(LivePhase {
            n,
            k,
            report,
            cost: before.per_step(&after, (n * k) as f64),
            peak_rss_kib: peak_rss_kib(agent.pid()?)?,
        })
    }

    /// Re-delivers the held executions `ids` (`k` steps each), `c` at a time: waited on by
    /// the kernel process (pinned) or through the client (deployed).
    async fn measure_replay(
        &self,
        world: &mut World,
        ids: &[String],
        k: usize,
    ) -> Result<(RunReport, PerStep)> {
        let c = self.c;
        let World {
            kernel,
            agent,
            client,
        } = world;
        let calls = kernel.provider_calls().await?;
        let before = Sample::take(agent, &kernel.proc).await?;
        let (mut report, redelivered) = match client {
            None => (kernel.run(&Request::Redeliver { c }).await?, None),
            Some(client) => {
                let (report, redelivered) = deployed::replay(client, kernel, ids, k, c).await?;
                (report, Some(redelivered))
            }
        };
        let after = Sample::take(agent, &kernel.proc).await?;
        report.provider_calls = kernel.provider_calls().await? - calls;
        if let (Some(client), Some(redelivered)) = (client, &redelivered) {
            deployed::replay_latencies(client, redelivered, k, c, &mut report).await?;
        }
        let cost = before.per_step(&after, report.steps.max(1) as f64);
        Ok((report, cost))
    }

    async fn idle(&self, variant: Variant, figures: &mut Figures) -> Result<()> {
        let m = self.options.m;
        for paced in [false, true] {
            let warm = Request::Live {
                n: 20,
                k: 1,
                c: 4,
                llm: false,
                rate: None,
            };
            let mut world = self.world(variant, warm).await?;
            tokio::time::sleep(Duration::from_millis(300)).await;
            let pid = world.agent.pid()?;
            let (before, fds_before) = (rss_kib(pid)?, open_fds(pid)?);
            match &world.client {
                None => drop(world.kernel.wait(&Request::Idle { m, paced }).await?),
                Some(client) => {
                    let input = json!({"k": 0, "mode": "idle"});
                    deployed::idle(client, &mut world.kernel, &input, m, paced, self.c).await?;
                }
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            let (after, fds_after) = (rss_kib(pid)?, open_fds(pid)?);
            let per = (after.saturating_sub(before) * 1024) as f64 / m as f64;
            let fds = (fds_after as f64 - fds_before as f64) / m as f64;
            let (bytes, sockets) = if paced {
                ("idle_paced_bytes_per_exec", "idle_paced_fds_per_exec")
            } else {
                ("idle_bytes_per_exec", "idle_fds_per_exec")
            };
            record(figures, self.key(variant), bytes, per);
            record(figures, self.key(variant), sockets, fds);
            eprintln!(
                "  idle{}: {before} KiB -> {after} KiB with {m} in flight: {per:.0} B each; open fds {fds_before} -> {fds_after}",
                if paced { " (paced)" } else { "" }
            );
            if !paced {
                let baseline = (before, fds_before);
                settled(pid, m, baseline, self.key(variant), figures).await?;
            }
            world.stop().await;
        }
        Ok(())
    }

    async fn ack(&self, variant: Variant, figures: &mut Figures) -> Result<()> {
        let stub = crate::ack::stub_kernel().await?;
        let (agent, webhook) = self.spawner.agent(variant, &stub).await?;
        let cpu0 = agent.cpu()?;
        let secs = Duration::from_secs_f64(self.options.ack_secs);
        let warmup = Duration::from_millis(500);
        let report =
            crate::ack::drive(&webhook, SECRET, self.options.ack_rate, warmup, secs).await?;
        let cpu1 = agent.cpu()?;
        let total = f64::from(self.options.ack_rate) * (secs + warmup).as_secs_f64();
        if report.ok != report.sent {
            eprintln!(
                "warning: {} of {} dispatches not answered 200",
                report.sent - report.ok,
                report.sent
            );
        }
        let mut put = |metric, value| record(figures, self.key(variant), metric, value);
        put("ack_p50_ms", report.p50_ms);
        put("ack_p99_ms", report.p99_ms);
        put("ack_max_ms", report.max_ms);
        put("ack_send_p50_ms", report.send_p50_ms);
        put("ack_send_p99_ms", report.send_p99_ms);
        put("ack_cpu_us_per_dispatch", (cpu1 - cpu0) * 1e6 / total);
        eprintln!(
            "  ack: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms over {} dispatches (from the send: p50 {:.3}, p99 {:.3})",
            report.p50_ms,
            report.p99_ms,
            report.max_ms,
            report.sent,
            report.send_p50_ms,
            report.send_p99_ms
        );
        agent.stop().await;
        Ok(())
    }
}

/// How long the idle executions wait before the settled figures: past rebuno-hyper's default
/// 5 s idle timeout, so the webhook connections the burst opened are closed by then.
const SETTLE: Duration = Duration::from_secs(7);

/// The idle figures again once the burst's idle connections had time to close.
async fn settled(
    pid: u32,
    m: usize,
    (before, fds_before): (u64, usize),
    key: Key,
    figures: &mut Figures,
) -> Result<()> {
    tokio::time::sleep(SETTLE).await;
    let (after, fds_after) = (rss_kib(pid)?, open_fds(pid)?);
    let per = (after.saturating_sub(before) * 1024) as f64 / m as f64;
    let fds = (fds_after as f64 - fds_before as f64) / m as f64;
    record(figures, key, "idle_settled_bytes_per_exec", per);
    record(figures, key, "idle_settled_fds_per_exec", fds);
    eprintln!(
        "  idle after {SETTLE:?}: {after} KiB: {per:.0} B each; open fds {fds_before} -> {fds_after}"
    );
    Ok(())
}
