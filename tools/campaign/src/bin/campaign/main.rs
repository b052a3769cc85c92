//! The fault campaign driver: a dev kernel in its own process (`campaign-kernel`, with a data
//! directory), two `campaign-agent` processes behind fault-injecting proxies, executions of
//! seeded programs under kills (of agents and of the kernel), freezes, cuts and duplicated,
//! delayed and stale deliveries; then the invariants (see `tools/campaign/README.md`).
//!
//! ```text
//! cargo build -p rebuno-campaign --bins
//! cargo run -p rebuno-campaign --bin campaign -- --seed 42
//! cargo run -p rebuno-campaign --bin campaign -- --soak --duration 2h
//! cargo run -p rebuno-campaign --bin campaign -- --seed 42 --scenario kernel-restart
//! ```
//!
//! Exit code 0: every invariant held; 1: a violation (printed with the seed); 2: set-up failed.

mod agents;
mod durability;
mod kernel;
mod ledger;
mod proxy;
mod scenario;
mod verify;
mod webhook;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rebuno_campaign::{LEASE, Program, Rng, generate};
use tokio::time::Instant;

use crate::agents::Slot;
use crate::durability::Witness;
use crate::kernel::{KernelHandle, Snapshot};
use crate::ledger::Ledger;
use crate::webhook::{Rates, WebhookProxy};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a running execution may take before it counts as stuck (faults still on).
const BOUND: Duration = Duration::from_secs(120);
/// Once faults stop, how long the stragglers get.
const DRAIN: Duration = Duration::from_secs(60);
/// Weights of the faults `inject` draws: agent kill, kill mid-step, short freeze, long freeze,
/// re-delivery, stale replay, kernel kill.
const FAULT_WEIGHTS: [u64; 7] = [10, 12, 14, 8, 20, 14, 4];
/// `--scenario kernel-restart`: kernel kills, executions and concurrency.
const RESTART_SCENARIO: (u64, usize, usize) = (8, 30, 3);

#[derive(Debug)]
struct Options {
    seed: u64,
    executions: usize,
    concurrency: usize,
    soak: Option<Duration>,
    workdir: Option<PathBuf>,
    cut_probability: f64,
    keep: bool,
    scenario: Option<String>,
    /// `--scenario kernel-restart`: this many kernel kills and no other fault.
    restarts_only: Option<u64>,
}

fn parse_duration(text: &str) -> Result<Duration, BoxError> {
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u64 = number.parse()?;
    Ok(match unit {
        "" | "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        other => return Err(format!("unknown duration unit {other:?}").into()),
    })
}

fn options() -> Result<Options, BoxError> {
    let mut options = Options {
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
        executions: 220,
        concurrency: 6,
        soak: None,
        workdir: None,
        cut_probability: 0.006,
        keep: false,
        scenario: None,
        restarts_only: None,
    };
    let (mut executions, mut concurrency) = (None, None);
    let mut soak = false;
    let mut duration = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--seed" => options.seed = value()?.parse()?,
            "--executions" => executions = Some(value()?.parse()?),
            "--concurrency" => concurrency = Some(value()?.parse::<usize>()?.max(1)),
            "--cut-probability" => options.cut_probability = value()?.parse()?,
            "--workdir" => options.workdir = Some(PathBuf::from(value()?)),
            "--duration" => duration = Some(parse_duration(&value()?)?),
            "--soak" => soak = true,
            "--keep" => options.keep = true,
            "--scenario" => options.scenario = Some(value()?),
            "--help" | "-h" => {
                println!(
                    "campaign [--seed S] [--executions M] [--concurrency C] [--cut-probability P]\n         [--soak --duration 2h] [--workdir DIR] [--keep]\n         [--scenario kernel-restart|repeat-after-deadline|stale-dispatch-then-repeat]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    if soak {
        options.soak = Some(duration.unwrap_or(Duration::from_secs(7200)));
    } else if duration.is_some() {
        return Err("--duration needs --soak".into());
    }
    if options.scenario.as_deref() == Some("kernel-restart") {
        let (kills, default_executions, default_concurrency) = RESTART_SCENARIO;
        options.scenario = None;
        options.restarts_only = Some(kills);
        options.cut_probability = 0.0;
        options.executions = default_executions;
        options.concurrency = default_concurrency;
        if soak {
            return Err("--scenario kernel-restart is bounded (no --soak)".into());
        }
    }
    options.executions = executions.unwrap_or(options.executions);
    options.concurrency = concurrency.unwrap_or(options.concurrency);
    Ok(options)
}

/// The campaign's moving parts.
struct World {
    kernel: KernelHandle,
    ledger: Arc<Ledger>,
    slots: Vec<Arc<Slot>>,
    webhook: Arc<WebhookProxy>,
    running: AtomicBool,
    /// A kernel kill and restart is in progress (at most one at a time).
    restarting: AtomicBool,
    /// The event logs read before each kernel kill.
    witness: Witness,
    /// Kernel restarts that failed (the kernel did not come back from its data directory).
    restart_failures: Mutex<Vec<String>>,
}

impl World {
    /// The executions (subagents included) not yet terminal; empty while the kernel is down.
    async fn live_executions(&self) -> Vec<String> {
        let mut live: Vec<String> = self
            .kernel
            .list_all()
            .await
            .unwrap_or_default()
            .into_iter()
            .filter(|e| !e.status.is_terminal())
            .map(|e| e.id)
            .collect();
        live.sort();
        live
    }

    /// Kills the kernel and restarts it after `pause`, checking the event logs across the
    /// restart; a failed restart is kept for the report.
    async fn restart_kernel(&self, pause: Duration) {
        let restarted = self
            .witness
            .kill_and_restart(&self.kernel, &self.ledger, pause)
            .await;
        if let Err(error) = restarted {
            eprintln!("{error}");
            if let Ok(mut failures) = self.restart_failures.lock() {
                failures.push(error);
            }
        }
        self.restarting.store(false, Ordering::SeqCst);
    }

    /// Waits until no kernel restart is in progress.
    async fn wait_restarted(&self) {
        while self.restarting.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Grants every pending approval after a short random pause.
async fn grant_approvals(world: Arc<World>, seed: u64) {
    let mut rng = Rng::derive(seed, 0x4000);
    let mut granted = HashSet::new();
    while world.running.load(Ordering::Relaxed) {
        for approval in world.kernel.approvals().await {
            if !granted.insert(approval.id.clone()) {
                continue;
            }
            let pause = Duration::from_millis(rng.range(0, 800));
            let world = Arc::clone(&world);
            tokio::spawn(async move {
                tokio::time::sleep(pause).await;
                grant(&world, &approval.id).await;
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Grants one approval, again while the kernel is down (for up to a minute).
async fn grant(world: &World, approval: &str) {
    for _ in 0..300 {
        match world.kernel.grant(approval).await {
            Some(status) if (200..300).contains(&status) => {
                world
                    .ledger
                    .counters
                    .approvals
                    .fetch_add(1, Ordering::Relaxed);
                return;
            }
            // Decided already (a grant whose answer a kernel kill lost).
            Some(status) if status < 500 => return,
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The fault schedule: one fault every 0.5–2 s, drawn from the seed ([`FAULT_WEIGHTS`]).
async fn inject(world: Arc<World>, seed: u64) {
    let mut rng = Rng::derive(seed, 0x2000);
    let mut last_thaw: Option<Instant> = None;
    while world.running.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(rng.range(500, 2000))).await;
        if !world.running.load(Ordering::Relaxed) || !world.ledger.faults_on() {
            return;
        }
        match rng.weighted(&FAULT_WEIGHTS) {
            choice @ (0 | 1) => kill_agent(&world, &mut rng, choice == 1).await,
            choice @ (2 | 3) => freeze(&world, &mut rng, choice == 3, &mut last_thaw),
            4 => {
                let live = world.live_executions().await;
                if !live.is_empty() {
                    let id = &live[rng.range(0, live.len() as u64 - 1) as usize];
                    if world.kernel.redeliver(id).await.is_some() {
                        world
                            .ledger
                            .counters
                            .redeliveries
                            .fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            5 => {
                world.webhook.replay_stale(&mut rng).await;
            }
            _ => {
                let pause = Duration::from_millis(rng.range(0, 1000));
                if !world.restarting.swap(true, Ordering::SeqCst) {
                    let world = Arc::clone(&world);
                    tokio::spawn(async move { world.restart_kernel(pause).await });
                }
            }
        }
    }
}

/// `--scenario kernel-restart`: `kills` kernel kills 1–2.5 s apart, each restarted after
/// 0–1 s, and nothing else.
async fn inject_restarts(world: Arc<World>, seed: u64, kills: u64) {
    let mut rng = Rng::derive(seed, 0x2000);
    for _ in 0..kills {
        tokio::time::sleep(Duration::from_millis(rng.range(1000, 2500))).await;
        if !world.running.load(Ordering::Relaxed) {
            return;
        }
        let pause = Duration::from_millis(rng.range(0, 1000));
        world.restarting.store(true, Ordering::SeqCst);
        world.restart_kernel(pause).await;
    }
}

/// Kills an agent slot (`mid_step`: the one running a step) and restarts it after 0–1 s.
async fn kill_agent(world: &World, rng: &mut Rng, mid_step: bool) {
    let counters = &world.ledger.counters;
    let mut slot = rng.range(0, world.slots.len() as u64 - 1) as usize;
    if mid_step {
        let mut executing = Vec::new();
        for id in world.live_executions().await {
            let steps = world.kernel.steps(&id).await.unwrap_or_default();
            if steps.iter().any(|s| s.status == "executing") {
                executing.push(id);
            }
        }
        if !executing.is_empty() {
            let id = &executing[rng.range(0, executing.len() as u64 - 1) as usize];
            if let Some(s) = world.webhook.current_slot(id) {
                slot = s;
                counters.kills_mid_step.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    let target = &world.slots[slot];
    target.kill().await;
    counters.kills.fetch_add(1, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(rng.range(0, 1000))).await;
    let mut tries = 0;
    while let Err(error) = target.spawn().await {
        tries += 1;
        eprintln!("restart of agent {slot} failed ({error}); again");
        if tries > 5 {
            break;
        }
    }
}

/// Freezes one or both proxies, for less (`long` false) or more than the lease.
fn freeze(world: &World, rng: &mut Rng, long: bool, last_thaw: &mut Option<Instant>) {
    // One freeze at a time, a second apart: a request is never stalled longer than one
    // freeze (the agent's kernel timeout is 10 s), so a timeout is never a fault nobody
    // injected.
    if last_thaw.is_some_and(|t| Instant::now() < t + Duration::from_secs(1)) {
        return;
    }
    let lease = LEASE.as_millis() as u64;
    let ms = if long {
        rng.range(lease + 500, lease + 3000)
    } else {
        rng.range(200, lease * 2 / 3)
    };
    let until = Instant::now() + Duration::from_millis(ms);
    *last_thaw = Some(until);
    if rng.chance(0.25) {
        for slot in 0..world.slots.len() {
            world.ledger.freeze(slot, until);
        }
    } else {
        let slot = rng.range(0, world.slots.len() as u64 - 1) as usize;
        world.ledger.freeze(slot, until);
    }
    let counters = &world.ledger.counters;
    if long {
        counters.freezes_long.fetch_add(1, Ordering::Relaxed);
    } else {
        counters.freezes_short.fetch_add(1, Ordering::Relaxed);
    }
}

/// Starts the kernel, the proxies, the webhook proxy and the agents.
async fn start_world(options: &Options, workdir: &Path) -> Result<Arc<World>, BoxError> {
    let seed = options.seed;
    let binaries = agents::binaries()?;
    // All ports at once, so no two are the same.
    let ports = agents::free_ports(6)?;
    let kernel_addr = std::net::SocketAddr::from(([127, 0, 0, 1], ports[4]));
    let ledger = Arc::new(Ledger::new(2, options.cut_probability));
    let mut slots = Vec::new();
    for index in 0..2 {
        let port = proxy::start(index, kernel_addr, Arc::clone(&ledger), seed).await?;
        slots.push(Slot::new(
            index,
            (ports[2 * index], ports[2 * index + 1]),
            format!("http://127.0.0.1:{port}"),
            &binaries.agent,
            workdir,
        )?);
    }
    let rates = if options.restarts_only.is_some() {
        Rates::NONE
    } else {
        Rates {
            duplicate: 0.15,
            delay: 0.15,
            deadline: 0.08,
        }
    };
    let (webhook, webhook_url) =
        WebhookProxy::start(Arc::clone(&ledger), slots.clone(), seed, rates).await?;
    let kernel =
        KernelHandle::start(&binaries.kernel, workdir, (ports[4], ports[5]), webhook_url).await?;
    for slot in &slots {
        if let Err(error) = slot.spawn().await {
            // process::exit skips destructors: kill what did start.
            for started in &slots {
                started.kill().await;
            }
            kernel.shutdown().await;
            return Err(error.into());
        }
    }
    Ok(Arc::new(World {
        kernel,
        ledger,
        slots,
        webhook,
        running: AtomicBool::new(true),
        restarting: AtomicBool::new(false),
        witness: Witness::default(),
        restart_failures: Mutex::new(Vec::new()),
    }))
}

/// What the creation phase produced.
struct Created {
    /// Top-level executions and their programs.
    executions: Vec<(String, Program)>,
    /// How long each took to end (sorted).
    durations: Vec<Duration>,
    /// Those not terminal within [`BOUND`].
    overdue: Vec<String>,
}

/// Creates the executions (bounded: `executions`; soak: until the end), `concurrency` in
/// flight, and waits for each to end.
async fn create_all(
    world: &Arc<World>,
    options: &Options,
    started: Instant,
) -> Result<Created, BoxError> {
    let mut programs = Rng::derive(options.seed, 0x5000);
    let semaphore = Arc::new(tokio::sync::Semaphore::new(options.concurrency));
    let mut executions: Vec<(String, Program)> = Vec::new();
    let mut waiters = Vec::new();
    let soak_end = options.soak.map(|d| started + d);
    let mut last_progress = Instant::now();
    loop {
        match soak_end {
            Some(end) if Instant::now() >= end => break,
            None if executions.len() >= options.executions => break,
            _ => {}
        }
        let permit = Arc::clone(&semaphore).acquire_owned().await?;
        let program = generate(&mut programs, executions.len());
        let id = world
            .kernel
            .create_execution(serde_json::to_value(&program)?)
            .await?;
        executions.push((id.clone(), program));
        let waiter = Arc::clone(world);
        waiters.push(tokio::spawn(async move {
            let begun = Instant::now();
            let ended = waiter.kernel.wait_terminal(&id, begun, BOUND).await;
            drop(permit);
            (id, begun.elapsed(), ended)
        }));
        if last_progress.elapsed() >= Duration::from_secs(60) {
            last_progress = Instant::now();
            print_progress(&world.ledger, started, executions.len());
        }
    }
    let (mut durations, mut overdue) = (Vec::new(), Vec::new());
    for waiter in waiters {
        if let Ok((id, took, ended)) = waiter.await {
            durations.push(took);
            if !ended {
                overdue.push(id);
            }
        }
    }
    durations.sort();
    Ok(Created {
        executions,
        durations,
        overdue,
    })
}

fn print_progress(ledger: &Ledger, started: Instant, created: usize) {
    let c = &ledger.counters;
    println!(
        "[{:>5}s] created={created} kills={} kernel_kills={} freezes={}/{} cuts={}/{} duplicated={} redeliveries={}",
        started.elapsed().as_secs(),
        c.kills.load(Ordering::Relaxed),
        c.kernel_kills.load(Ordering::Relaxed),
        c.freezes_short.load(Ordering::Relaxed),
        c.freezes_long.load(Ordering::Relaxed),
        c.cut_requests.load(Ordering::Relaxed),
        c.cut_responses.load(Ordering::Relaxed),
        c.duplicated.load(Ordering::Relaxed),
        c.redeliveries.load(Ordering::Relaxed),
    );
}

/// Faults off (after any kernel restart in progress); stragglers get [`DRAIN`] to end.
async fn drain(world: &World) {
    world.ledger.stop_faults();
    world.wait_restarted().await;
    let drain_start = Instant::now();
    while drain_start.elapsed() < DRAIN {
        let live = match world.kernel.list_all().await {
            Some(all) => all.iter().filter(|e| !e.status.is_terminal()).count(),
            None => 1,
        };
        if live == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Late writes of superseded runs settle before the logs are read.
    tokio::time::sleep(Duration::from_secs(2)).await;
}

/// Reads the kernel once more and runs every check.
async fn check(
    world: &World,
    options: &Options,
    created: &Created,
    effects_path: &Path,
) -> Result<(Snapshot, verify::Report), BoxError> {
    let snapshot = Snapshot::take(&world.kernel).await?;
    let mut logs: Vec<PathBuf> = world
        .slots
        .iter()
        .map(|s| s.stderr_path().to_owned())
        .collect();
    logs.push(world.kernel.log_path().to_owned());
    let mut report = verify::verify(&verify::Inputs {
        kernel: &snapshot,
        ledger: &world.ledger,
        created: &created.executions,
        effects_path,
        agent_logs: logs,
        children: snapshot.children(),
        restarts_only: options.restarts_only.is_some(),
    });
    for id in &created.overdue {
        report.violations.push(verify::Violation {
            invariant: "every execution ends within the bound",
            execution: id.clone(),
            detail: format!("not terminal {BOUND:?} after creation (faults on)"),
        });
    }
    report.violations.extend(world.witness.finish(&snapshot));
    let failures = world
        .restart_failures
        .lock()
        .map(|f| f.clone())
        .unwrap_or_default();
    for failure in failures {
        report.violations.push(verify::Violation {
            invariant: "the kernel restarts from its data directory",
            execution: "-".to_owned(),
            detail: failure,
        });
    }
    if let Some(kills) = options.restarts_only {
        let done = world.ledger.counters.kernel_kills.load(Ordering::Relaxed);
        if done < kills {
            report.violations.push(verify::Violation {
                invariant: "the scenario ran its kernel kills",
                execution: "-".to_owned(),
                detail: format!("{done} of {kills} kernel kills happened"),
            });
        }
    }
    Ok((snapshot, report))
}

/// `dispatch.reclaimed` events by their reason (`lease_expired`, `kernel_restart`, ...).
fn reclaims(snapshot: &Snapshot, ids: &[String]) -> BTreeMap<String, usize> {
    let mut by_reason = BTreeMap::new();
    for id in ids {
        for event in snapshot.events(id) {
            if event.kind == "dispatch.reclaimed" {
                let reason = event.payload["error"].as_str().unwrap_or("?").to_owned();
                *by_reason.entry(reason).or_default() += 1;
            }
        }
    }
    by_reason
}

/// Lines of the kernel's log saying a lease was taken up after a restart.
fn leases_kept(kernel: &KernelHandle) -> usize {
    std::fs::read_to_string(kernel.log_path())
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("lease kept across the restart"))
        .count()
}

/// Prints the summary: counts, failure classes, settles, timings.
fn print_summary(
    world: &World,
    snapshot: &Snapshot,
    report: &verify::Report,
    created: &Created,
    seed: u64,
) {
    let c = &world.ledger.counters;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    println!("--- summary (seed={seed}) ---");
    println!(
        "executions={} (+{} subagents) completed={} failed={} {:?}",
        report.executions,
        report.children,
        report.completed,
        report.failed.values().sum::<usize>(),
        report.failed
    );
    println!(
        "kills={} (mid-step {}) freezes short={} long={} cuts request={} response={}",
        load(&c.kills),
        load(&c.kills_mid_step),
        load(&c.freezes_short),
        load(&c.freezes_long),
        load(&c.cut_requests),
        load(&c.cut_responses)
    );
    print_kernel_kills(world, snapshot, created);
    println!(
        "deliveries={} duplicated={} delayed={} stale_replays={} redeliveries={} deadline_cuts={} approvals_granted={}",
        load(&c.deliveries),
        load(&c.duplicated),
        load(&c.delayed),
        load(&c.stale_replays),
        load(&c.redeliveries),
        load(&c.deadlines),
        load(&c.approvals)
    );
    println!(
        "effects={} at_most_once_effects={} indeterminate_steps={} settle_calls={} superseded_settles_refused={}",
        report.effects,
        report.at_most_once_effects,
        report.indeterminate_steps,
        world.ledger.settles().len(),
        report.fenced
    );
    println!("settles by kind/status/decision: {:?}", report.settles);
    for (class, example) in &report.failed_examples {
        println!("failed e.g. [{class}] {example}");
    }
}

/// The kernel-kill line of the summary.
fn print_kernel_kills(world: &World, snapshot: &Snapshot, created: &Created) {
    let c = &world.ledger.counters;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    println!(
        "kernel_kills={} (with executions running {}) down total={}ms max={}ms leases_kept={} events_compared={} reclaims={:?}",
        load(&c.kernel_kills),
        load(&c.kernel_kills_live),
        load(&c.kernel_down_ms),
        load(&c.kernel_down_max_ms),
        leases_kept(&world.kernel),
        load(&world.witness.compared),
        reclaims(snapshot, &snapshot_ids(snapshot, created))
    );
}

/// Every execution the snapshot holds (the created ones first).
fn snapshot_ids(snapshot: &Snapshot, created: &Created) -> Vec<String> {
    let mut ids: Vec<String> = created
        .executions
        .iter()
        .map(|(id, _)| id.clone())
        .collect();
    for children in snapshot.children().into_values() {
        ids.extend(children);
    }
    ids
}

/// Prints the timings and every violation (the first three with their logs and traces).
fn print_verdict(
    world: &World,
    snapshot: &Snapshot,
    report: &verify::Report,
    created: &Created,
    seed: u64,
    started: Instant,
    faulted: Duration,
) {
    let quantile = |q: f64| {
        created
            .durations
            .get(((created.durations.len() as f64 - 1.0) * q).round() as usize)
            .map_or(0.0, Duration::as_secs_f64)
    };
    println!(
        "execution time p50={:.1}s p99={:.1}s max={:.1}s (bound {BOUND:?})",
        quantile(0.5),
        quantile(0.99),
        quantile(1.0)
    );
    println!(
        "wall={:.1}s (faults {:.1}s) violations={}",
        started.elapsed().as_secs_f64(),
        faulted.as_secs_f64(),
        report.violations.len()
    );
    for (n, violation) in report.violations.iter().enumerate() {
        println!(
            "VIOLATION [{}] execution={} seed={seed}: {}",
            violation.invariant, violation.execution, violation.detail
        );
        if n < 3 {
            print_events(snapshot, &violation.execution);
            for line in world.ledger.trace_of(&violation.execution) {
                println!("    trace {line}");
            }
        }
    }
}

fn print_events(snapshot: &Snapshot, id: &str) {
    for event in snapshot.events(id) {
        println!(
            "    {:>3} {:<24} {}",
            event.event_seq, event.kind, event.payload
        );
    }
}

/// Creates the work directory (fresh effect log and kernel data directory), prints the mode;
/// returns it and the effect log's path.
fn prepare_workdir(options: &Options) -> Result<(PathBuf, PathBuf), BoxError> {
    let seed = options.seed;
    let workdir = options.workdir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("rebuno-campaign-{seed}-{}", std::process::id()))
    });
    std::fs::create_dir_all(&workdir)?;
    let effects_path = workdir.join("effects.jsonl");
    let _ = std::fs::remove_file(&effects_path);
    let _ = std::fs::remove_dir_all(workdir.join("kernel"));
    let mode = match (options.soak, options.restarts_only) {
        (Some(d), _) => format!("soak duration={d:?}"),
        (None, Some(kills)) => format!(
            "kernel-restart executions={} kernel_kills={kills}",
            options.executions
        ),
        (None, None) => format!("bounded executions={}", options.executions),
    };
    println!("workdir={} lease={LEASE:?} mode={mode}", workdir.display());
    Ok((workdir, effects_path))
}

/// One campaign run (bounded, soak, or `--scenario kernel-restart`); whether every invariant
/// held.
async fn run(options: Options) -> Result<bool, BoxError> {
    let seed = options.seed;
    let started = Instant::now();
    let (workdir, effects_path) = prepare_workdir(&options)?;
    let world = start_world(&options, &workdir).await?;
    let granter = tokio::spawn(grant_approvals(Arc::clone(&world), seed));
    let injector = match options.restarts_only {
        Some(kills) => tokio::spawn(inject_restarts(Arc::clone(&world), seed, kills)),
        None => tokio::spawn(inject(Arc::clone(&world), seed)),
    };
    let mut injector = Some(injector);
    let created = create_all(&world, &options, started).await;
    if options.restarts_only.is_some()
        && created.is_ok()
        && let Some(kills) = injector.take()
    {
        // The scenario's kills all happen, even after the last execution ended.
        let _ = kills.await;
    }
    let faulted = started.elapsed();
    drain(&world).await;
    world.running.store(false, Ordering::Relaxed);
    if let Some(injector) = injector {
        let _ = injector.await;
    }
    world.wait_restarted().await;
    let _ = granter.await;
    let outcome = match created {
        Ok(created) => check(&world, &options, &created, &effects_path)
            .await
            .map(|(snapshot, report)| (created, snapshot, report)),
        Err(error) => Err(error),
    };
    for slot in &world.slots {
        slot.kill().await;
    }
    world.kernel.shutdown().await;
    let (created, snapshot, report) = outcome?;
    print_summary(&world, &snapshot, &report, &created, seed);
    print_verdict(&world, &snapshot, &report, &created, seed, started, faulted);
    let ok = report.violations.is_empty();
    if ok && !options.keep {
        let _ = std::fs::remove_dir_all(&workdir);
    } else {
        println!("logs kept in {}", workdir.display());
    }
    Ok(ok)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let options = match options() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("campaign: {error}");
            std::process::exit(2);
        }
    };
    if let Some(name) = &options.scenario {
        let outcome = match name.as_str() {
            "repeat-after-deadline" => scenario::repeat_after_deadline().await,
            "stale-dispatch-then-repeat" => scenario::stale_dispatch_then_repeat().await,
            other => Err(format!("unknown scenario {other}").into()),
        };
        match outcome {
            Ok(true) => println!("scenario {name}: held"),
            Ok(false) => {
                println!("scenario {name}: VIOLATION (at-most-once effect ran twice)");
                std::process::exit(1);
            }
            Err(error) => {
                eprintln!("scenario {name} failed: {error}");
                std::process::exit(2);
            }
        }
        return;
    }
    println!("seed={}", options.seed);
    let seed = options.seed;
    match run(options).await {
        Ok(true) => {}
        Ok(false) => {
            println!("FAILED seed={seed}");
            std::process::exit(1);
        }
        Err(error) => {
            eprintln!("campaign set-up failed (seed={seed}): {error}");
            std::process::exit(2);
        }
    }
}
