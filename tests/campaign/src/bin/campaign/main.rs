//! The fault campaign driver: a dev kernel in-process, two `campaign-agent` processes behind
//! fault-injecting proxies, executions of seeded programs under kills, freezes, cuts and
//! duplicated, delayed and stale deliveries; then the invariants (see `tests/campaign/README.md`).
//!
//! ```text
//! cargo build -p rebuno-campaign --bins
//! cargo run -p rebuno-campaign --bin campaign -- --seed 42
//! cargo run -p rebuno-campaign --bin campaign -- --soak --duration 2h
//! ```
//!
//! Exit code 0: every invariant held; 1: a violation (printed with the seed); 2: set-up failed.

mod agents;
mod ledger;
mod proxy;
mod scenario;
mod verify;
mod webhook;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rebuno_campaign::{AGENT_ID, Program, Rng, SECRET, generate, policy_yaml};
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution, StepStatus};
use tokio::time::Instant;
use uuid::Uuid;

use crate::agents::Slot;
use crate::ledger::Ledger;
use crate::webhook::{Rates, WebhookProxy};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Lease period the kernel hands out (the SDK heartbeats every lease / 3).
const LEASE: Duration = Duration::from_secs(3);
/// How long a running execution may take before it counts as stuck (faults still on).
const BOUND: Duration = Duration::from_secs(120);
/// Once faults stop, how long the stragglers get.
const DRAIN: Duration = Duration::from_secs(60);

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
    };
    let mut soak = false;
    let mut duration = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--seed" => options.seed = value()?.parse()?,
            "--executions" => options.executions = value()?.parse()?,
            "--concurrency" => options.concurrency = value()?.parse::<usize>()?.max(1),
            "--cut-probability" => options.cut_probability = value()?.parse()?,
            "--workdir" => options.workdir = Some(PathBuf::from(value()?)),
            "--duration" => duration = Some(parse_duration(&value()?)?),
            "--soak" => soak = true,
            "--keep" => options.keep = true,
            "--scenario" => options.scenario = Some(value()?),
            "--help" | "-h" => {
                println!(
                    "campaign [--seed S] [--executions M] [--concurrency C] [--cut-probability P]\n         [--soak --duration 2h] [--workdir DIR] [--keep]\n         [--scenario repeat-after-deadline|stale-dispatch-then-repeat]"
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
    Ok(options)
}

/// The campaign's moving parts.
struct World {
    kernel: DevKernel,
    ledger: Arc<Ledger>,
    slots: Vec<Arc<Slot>>,
    webhook: Arc<WebhookProxy>,
    running: AtomicBool,
    /// Executions seen alive (created or delivered).
    seen: Mutex<HashSet<Uuid>>,
}

impl World {
    fn live_executions(&self) -> Vec<Uuid> {
        let mut seen: HashSet<Uuid> = self
            .seen
            .lock()
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default();
        seen.extend(self.webhook.executions_seen());
        let mut live: Vec<Uuid> = seen
            .into_iter()
            .filter(|id| {
                self.kernel
                    .execution(*id)
                    .is_some_and(|e| !e.status.is_terminal())
            })
            .collect();
        live.sort();
        live
    }
}

/// Grants every pending approval after a short random pause.
async fn grant_approvals(world: Arc<World>, seed: u64) {
    let mut rng = Rng::derive(seed, 0x4000);
    let mut granted = HashSet::new();
    while world.running.load(Ordering::Relaxed) {
        for approval in world.kernel.approvals() {
            if !granted.insert(approval.id) {
                continue;
            }
            let pause = Duration::from_millis(rng.range(0, 800));
            let world = Arc::clone(&world);
            tokio::spawn(async move {
                tokio::time::sleep(pause).await;
                if world.kernel.grant(approval.id).is_ok() {
                    world
                        .ledger
                        .counters
                        .approvals
                        .fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The fault schedule: one fault every 0.5–2 s, drawn from the seed.
async fn inject(world: Arc<World>, seed: u64) {
    let mut rng = Rng::derive(seed, 0x2000);
    let counters = &world.ledger.counters;
    let mut last_thaw: Option<Instant> = None;
    while world.running.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(rng.range(500, 2000))).await;
        if !world.running.load(Ordering::Relaxed) || !world.ledger.faults_on() {
            return;
        }
        // kill, kill mid-step, short freeze, long freeze, redeliver, stale replay
        match rng.weighted(&[10, 12, 14, 8, 20, 14]) {
            choice @ (0 | 1) => {
                let mut slot = rng.range(0, world.slots.len() as u64 - 1) as usize;
                if choice == 1 {
                    let executing: Vec<Uuid> = world
                        .live_executions()
                        .into_iter()
                        .filter(|id| {
                            world
                                .kernel
                                .steps(*id)
                                .iter()
                                .any(|s| s.status == StepStatus::Executing)
                        })
                        .collect();
                    if !executing.is_empty() {
                        let id = executing[rng.range(0, executing.len() as u64 - 1) as usize];
                        if let Some(s) = world.webhook.current_slot(&id.to_string()) {
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
            choice @ (2 | 3) => {
                // One freeze at a time, a second apart: a request is never stalled longer than
                // one freeze (the agent's kernel timeout is 10 s), so a timeout is never a fault
                // nobody injected.
                if last_thaw.is_some_and(|t| Instant::now() < t + Duration::from_secs(1)) {
                    continue;
                }
                let long = choice == 3;
                let lease = LEASE.as_millis() as u64;
                let ms = if long {
                    rng.range(lease + 500, lease + 3000)
                } else {
                    rng.range(200, lease * 2 / 3)
                };
                let until = Instant::now() + Duration::from_millis(ms);
                last_thaw = Some(until);
                if rng.chance(0.25) {
                    for slot in 0..world.slots.len() {
                        world.ledger.freeze(slot, until);
                    }
                } else {
                    let slot = rng.range(0, world.slots.len() as u64 - 1) as usize;
                    world.ledger.freeze(slot, until);
                }
                if long {
                    counters.freezes_long.fetch_add(1, Ordering::Relaxed);
                } else {
                    counters.freezes_short.fetch_add(1, Ordering::Relaxed);
                }
            }
            4 => {
                let live = world.live_executions();
                if !live.is_empty() {
                    let id = live[rng.range(0, live.len() as u64 - 1) as usize];
                    if world.kernel.redeliver(id).is_ok() {
                        counters.redeliveries.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            _ => {
                world.webhook.replay_stale(&mut rng).await;
            }
        }
    }
}

/// Every execution of the agent, with the parent of each spawned one.
async fn children_index(kernel: &DevKernel) -> HashMap<String, Vec<Uuid>> {
    let mut index: HashMap<String, Vec<Uuid>> = HashMap::new();
    let Ok(client) = rebuno::client::Client::builder()
        .base_url(kernel.url())
        .build()
    else {
        return index;
    };
    let mut cursor: Option<String> = None;
    loop {
        let mut list = client.list().agent_id(AGENT_ID).limit(100);
        if let Some(c) = &cursor {
            list = list.cursor(c.clone());
        }
        let Ok(page) = list.send().await else {
            break;
        };
        for execution in &page.executions {
            let Ok(id) = Uuid::parse_str(&execution.id) else {
                continue;
            };
            if let Some(spawned_by) = kernel.execution(id).and_then(|e| e.spawned_by) {
                index.entry(spawned_by.execution_id).or_default().push(id);
            }
        }
        match page.next_cursor {
            Some(next) if !page.executions.is_empty() => cursor = Some(next),
            _ => break,
        }
    }
    index
}

fn print_events(kernel: &DevKernel, id: &str) {
    let Ok(id) = Uuid::parse_str(id) else {
        return;
    };
    for event in kernel.events(id) {
        println!(
            "    {:>3} {:<24} {}",
            event.event_seq, event.kind, event.payload
        );
    }
}

async fn run(options: Options) -> Result<bool, BoxError> {
    let seed = options.seed;
    let started = Instant::now();
    let workdir = options.workdir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("rebuno-campaign-{seed}-{}", std::process::id()))
    });
    std::fs::create_dir_all(&workdir)?;
    let effects_path = workdir.join("effects.jsonl");
    let _ = std::fs::remove_file(&effects_path);
    println!(
        "workdir={} lease={:?} mode={}",
        workdir.display(),
        LEASE,
        options.soak.map_or(
            format!("bounded executions={}", options.executions),
            |d| format!("soak duration={d:?}")
        )
    );
    let binary = agents::agent_binary()?;
    let kernel = DevKernel::builder()
        .default_lease_timeout(LEASE)
        .max_attempts(100_000)
        .retry_backoff(Duration::from_millis(100), Duration::from_secs(1))
        .webhook_timeout(Duration::from_secs(5))
        .start()
        .await?;
    let ledger = Arc::new(Ledger::new(2, options.cut_probability));
    let mut slots = Vec::new();
    let ports = agents::free_ports(4)?;
    for index in 0..2 {
        let port = proxy::start(index, kernel.addr(), Arc::clone(&ledger), seed).await?;
        slots.push(Slot::new(
            index,
            (ports[2 * index], ports[2 * index + 1]),
            format!("http://127.0.0.1:{port}"),
            &binary,
            &workdir,
        )?);
    }
    let rates = Rates {
        duplicate: 0.15,
        delay: 0.15,
        deadline: 0.08,
    };
    let (webhook, webhook_url) =
        WebhookProxy::start(Arc::clone(&ledger), slots.clone(), seed, rates).await?;
    kernel
        .register_agent(AgentSpec::new(AGENT_ID, webhook_url, SECRET).policy_yaml(policy_yaml()))?;
    for slot in &slots {
        if let Err(error) = slot.spawn().await {
            // process::exit skips destructors: kill what did start.
            for started in &slots {
                started.kill().await;
            }
            return Err(error.into());
        }
    }
    let world = Arc::new(World {
        kernel: kernel.clone(),
        ledger: Arc::clone(&ledger),
        slots: slots.clone(),
        webhook: Arc::clone(&webhook),
        running: AtomicBool::new(true),
        seen: Mutex::new(HashSet::new()),
    });
    let granter = tokio::spawn(grant_approvals(Arc::clone(&world), seed));
    let injector = tokio::spawn(inject(Arc::clone(&world), seed));
    let mut programs = Rng::derive(seed, 0x5000);
    let semaphore = Arc::new(tokio::sync::Semaphore::new(options.concurrency));
    let mut created: Vec<(Uuid, Program)> = Vec::new();
    let mut waiters = Vec::new();
    let soak_end = options.soak.map(|d| started + d);
    let mut last_progress = Instant::now();
    let mut index = 0usize;
    loop {
        match soak_end {
            Some(end) if Instant::now() >= end => break,
            None if index >= options.executions => break,
            _ => {}
        }
        let permit = Arc::clone(&semaphore).acquire_owned().await?;
        let program = generate(&mut programs, index);
        index += 1;
        let input = serde_json::to_value(&program)?;
        let execution = kernel
            .create_execution(NewExecution::new(AGENT_ID, input))
            .await?;
        if let Ok(mut seen) = world.seen.lock() {
            seen.insert(execution.id);
        }
        created.push((execution.id, program));
        let world = Arc::clone(&world);
        waiters.push(tokio::spawn(async move {
            let begun = Instant::now();
            let ended = world
                .kernel
                .wait_terminal(execution.id, BOUND)
                .await
                .is_ok();
            drop(permit);
            (execution.id, begun.elapsed(), ended)
        }));
        if last_progress.elapsed() >= Duration::from_secs(60) {
            last_progress = Instant::now();
            let c = &ledger.counters;
            println!(
                "[{:>5}s] created={} kills={} freezes={}/{} cuts={}/{} duplicated={} redeliveries={}",
                started.elapsed().as_secs(),
                created.len(),
                c.kills.load(Ordering::Relaxed),
                c.freezes_short.load(Ordering::Relaxed),
                c.freezes_long.load(Ordering::Relaxed),
                c.cut_requests.load(Ordering::Relaxed),
                c.cut_responses.load(Ordering::Relaxed),
                c.duplicated.load(Ordering::Relaxed),
                c.redeliveries.load(Ordering::Relaxed),
            );
        }
    }
    let mut durations = Vec::new();
    let mut overdue = Vec::new();
    for waiter in waiters {
        if let Ok((id, took, ended)) = waiter.await {
            durations.push(took);
            if !ended {
                overdue.push(id);
            }
        }
    }
    durations.sort();
    let faulted = started.elapsed();
    // Drain: no more faults; stragglers (children included) get DRAIN to end.
    ledger.stop_faults();
    let drain_start = Instant::now();
    while drain_start.elapsed() < DRAIN {
        let live = created
            .iter()
            .filter(|(id, _)| {
                kernel
                    .execution(*id)
                    .is_some_and(|e| !e.status.is_terminal())
            })
            .count();
        if live == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Late writes of superseded runs settle before the logs are read.
    tokio::time::sleep(Duration::from_secs(2)).await;
    world.running.store(false, Ordering::Relaxed);
    let _ = injector.await;
    let _ = granter.await;
    let children = children_index(&kernel).await;
    let mut report = verify::verify(&verify::Inputs {
        kernel: &kernel,
        ledger: &ledger,
        created: &created,
        effects_path: &effects_path,
        agent_logs: slots.iter().map(|s| s.stderr_path().to_owned()).collect(),
        children,
    });
    for id in overdue {
        report.violations.push(verify::Violation {
            invariant: "every execution ends within the bound",
            execution: id.to_string(),
            detail: format!("not terminal {BOUND:?} after creation (faults on)"),
        });
    }
    for slot in &slots {
        slot.kill().await;
    }
    let c = &ledger.counters;
    let quantile = |q: f64| {
        durations
            .get(((durations.len() as f64 - 1.0) * q).round() as usize)
            .map_or(0.0, Duration::as_secs_f64)
    };
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
        ledger.settles().len(),
        report.fenced
    );
    println!("settles by kind/status/decision: {:?}", report.settles);
    for (class, example) in &report.failed_examples {
        println!("failed e.g. [{class}] {example}");
    }
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
            print_events(&kernel, &violation.execution);
            for line in ledger.trace_of(&violation.execution) {
                println!("    trace {line}");
            }
        }
    }
    let ok = report.violations.is_empty();
    if ok && !options.keep {
        let _ = std::fs::remove_dir_all(&workdir);
    } else {
        println!("logs kept in {}", workdir.display());
    }
    kernel.shutdown().await;
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
