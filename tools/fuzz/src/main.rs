//! `rebuno-fuzz --target NAME|all --cases N --seed S`: runs N seeded cases per target and stops
//! at the first failure, printing its seed, case index and inputs.
//!
//! Other flags: `--case I` (run only case I, with every input recorded in full), `--start I`
//! (first case index, to split a soak run), `--timeout SECS` (per-case watchdog, default 120),
//! `--verbose`, `--list`.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

struct Args {
    target: String,
    cases: u64,
    seed: u64,
    start: u64,
    case: Option<u64>,
    timeout: u64,
    verbose: bool,
    list: bool,
    probe_depth: Option<u64>,
    probe_glob: Option<u64>,
}

fn parse_number(text: &str) -> Result<u64, String> {
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.replace('_', "").parse(),
    };
    parsed.map_err(|e| format!("not a number: {text:?} ({e})"))
}

fn default_seed() -> u64 {
    #[allow(clippy::disallowed_methods)] // a host-side harness, never built for wasm32
    let now = std::time::SystemTime::now();
    now.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        target: "all".to_owned(),
        cases: 10_000,
        seed: default_seed(),
        start: 0,
        case: None,
        timeout: 120,
        verbose: false,
        list: false,
        probe_depth: None,
        probe_glob: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--target" => args.target = value()?,
            "--cases" => args.cases = parse_number(&value()?)?,
            "--seed" => args.seed = parse_number(&value()?)?,
            "--start" => args.start = parse_number(&value()?)?,
            "--case" => args.case = Some(parse_number(&value()?)?),
            "--timeout" => args.timeout = parse_number(&value()?)?,
            "--verbose" => args.verbose = true,
            "--list" => args.list = true,
            "--probe-policy-glob" => args.probe_glob = Some(parse_number(&value()?)?),
            "--probe-canonical-depth" => args.probe_depth = Some(parse_number(&value()?)?),
            "-h" | "--help" => {
                return Err(
                    "usage: rebuno-fuzz [--target NAME|all] [--cases N] [--seed S] [--start I] \
                     [--case I] [--timeout SECS] [--verbose] [--list]"
                        .to_owned(),
                );
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(args)
}

/// Where the run is, for the watchdog: target index and case index.
#[derive(Default)]
struct Progress {
    target: AtomicU64,
    case: AtomicU64,
}

/// Exits with status 3 when one case runs longer than `timeout`, naming it.
fn watchdog(progress: Arc<Progress>, seed: u64, timeout: Duration) {
    #[allow(clippy::disallowed_methods)] // host-side harness
    let spawned = std::thread::Builder::new()
        .name("watchdog".to_owned())
        .spawn(move || {
            #[allow(clippy::disallowed_methods)]
            let start = std::time::Instant::now();
            let mut last = (u64::MAX, u64::MAX);
            let mut stuck_since = start.elapsed();
            loop {
                std::thread::sleep(Duration::from_millis(500));
                let now = start.elapsed();
                let current = (
                    progress.target.load(Ordering::Relaxed),
                    progress.case.load(Ordering::Relaxed),
                );
                if current != last {
                    last = current;
                    stuck_since = now;
                    continue;
                }
                if now - stuck_since > timeout {
                    let name = usize::try_from(current.0)
                        .ok()
                        .and_then(|i| rebuno_fuzz::targets().get(i))
                        .map_or("?", |t| t.name);
                    println!(
                        "FAILED target={name} seed={seed} case={} kind=timeout (no progress for {timeout:?})",
                        current.1
                    );
                    println!(
                        "reproduce: cargo run --release -p rebuno-fuzz -- --target {name} --seed {seed} --case {} --verbose",
                        current.1
                    );
                    std::process::exit(3);
                }
            }
        });
    if let Err(error) = spawned {
        eprintln!("warning: no watchdog ({error})");
    }
}

/// Runs the dev kernel's `canonical_json` on `depth` nested arrays on a thread with Tokio's
/// default 2 MiB worker stack, as the kernel's HTTP handlers do. Past some depth the process
/// aborts with a stack overflow (no panic to catch): this reproduces that.
fn probe_canonical_depth(depth: u64) -> ExitCode {
    let depth = usize::try_from(depth).unwrap_or(usize::MAX);
    let mut text = "[".repeat(depth);
    text.push_str(&"]".repeat(depth));
    let parsed_as_raw = serde_json::from_str::<Box<serde_json::value::RawValue>>(&text).is_ok();
    println!(
        "depth={depth} body_bytes={} serde_json_raw_value_accepts={parsed_as_raw}",
        text.len()
    );
    #[allow(clippy::disallowed_methods)] // host-side harness
    let handle = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            rebuno_devkernel::identity::canonical_json(text.as_bytes()).map(|c| c.len())
        });
    match handle.map(|h| h.join()) {
        Ok(Ok(result)) => {
            println!("canonical_json returned {result:?}");
            ExitCode::SUCCESS
        }
        _ => ExitCode::FAILURE,
    }
}

/// Times `POST /v0/policies/{id}/test` of a real dev kernel for a glob rule with 8 stars against
/// targets of 10 up to `max_len` characters: the glob matcher backtracks, so the time grows
/// like C(len + 8, 8). Each request gives up after 30 s; the exit status is a failure when
/// one took more than 2 s.
fn probe_policy_glob(max_len: u64) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("no runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let kernel = match rebuno_devkernel::DevKernel::start().await {
            Ok(kernel) => kernel,
            Err(error) => {
                eprintln!("dev kernel: {error}");
                return ExitCode::FAILURE;
            }
        };
        let spec = rebuno_devkernel::AgentSpec::new("glob", "http://127.0.0.1:1/webhook", "s");
        if let Err(error) = kernel.register_agent(spec) {
            eprintln!("register: {error}");
            return ExitCode::FAILURE;
        }
        let http = reqwest::Client::new();
        let pattern = format!("{}*b", "*a".repeat(8));
        let mut len = 10;
        let mut slowest = 0f64;
        while len <= max_len {
            let (status, seconds) = time_glob_test(&http, &kernel.url(), &pattern, len).await;
            slowest = slowest.max(seconds);
            println!("pattern={pattern} target_len={len} status={status} seconds={seconds:.3}");
            if status == "timeout" {
                break;
            }
            len += 5;
        }
        if slowest > 2.0 {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        }
    })
}

/// One timed `POST /v0/policies/glob/test` of the kernel at `url`: a bundle whose only rule
/// matches `pattern`, tested against a target of `len` `a`s. Returns the status (or `timeout`,
/// or the error) and the seconds the request took.
async fn time_glob_test(
    http: &reqwest::Client,
    url: &str,
    pattern: &str,
    len: u64,
) -> (String, f64) {
    let body = serde_json::json!({
        "bundle": format!("rules:\n  - id: g\n    when: {{ target: \"{pattern}\" }}\n    then: {{ decision: allow }}\n"),
        "cases": [{"target": "a".repeat(usize::try_from(len).unwrap_or(0))}],
    });
    #[allow(clippy::disallowed_methods)] // host-side harness
    let started = std::time::Instant::now();
    let sent = http
        .post(format!("{url}/v0/policies/glob/test"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .timeout(Duration::from_secs(30))
        .send()
        .await;
    let status = match sent {
        Ok(response) => response.status().as_u16().to_string(),
        Err(error) if error.is_timeout() => "timeout".to_owned(),
        Err(error) => format!("error {error}"),
    };
    (status, started.elapsed().as_secs_f64())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    if let Some(length) = args.probe_glob {
        return probe_policy_glob(length);
    }
    if let Some(depth) = args.probe_depth {
        return probe_canonical_depth(depth);
    }
    let all = rebuno_fuzz::targets();
    if args.list {
        for target in all {
            println!("{:<18} {}", target.name, target.description);
        }
        return ExitCode::SUCCESS;
    }
    let Some(selected) = select(all, &args.target) else {
        eprintln!("unknown target {:?}; try --list", args.target);
        return ExitCode::from(2);
    };
    println!("seed={}", args.seed);
    match args.case {
        Some(case) => replay_case(&selected, args.seed, case),
        None => run_all(&args, &selected),
    }
}

/// A selected target and its index in [`rebuno_fuzz::targets`] (for the watchdog).
type Selected = (usize, &'static rebuno_fuzz::Target);

/// The targets `--target` names: every one for `all`, else the one called `name` (`None`
/// when there is none).
fn select(all: &'static [rebuno_fuzz::Target], name: &str) -> Option<Vec<Selected>> {
    if name == "all" {
        Some(all.iter().enumerate().collect())
    } else {
        all.iter()
            .position(|t| t.name == name)
            .map(|i| vec![(i, &all[i])])
    }
}

/// `--case I`: runs case `case` of each selected target with every input recorded, and stops
/// at the first failure.
fn replay_case(selected: &[Selected], seed: u64, case: u64) -> ExitCode {
    for (_, target) in selected {
        match rebuno_fuzz::run_case(target, seed, case, true) {
            Ok(()) => println!("target={} case={case} seed={seed} ok", target.name),
            Err(failure) => {
                print!("{failure}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// The run proper: `--cases` cases of each selected target from `--start`, under the watchdog,
/// one summary line per target, then the total; stops at the first failure.
fn run_all(args: &Args, selected: &[Selected]) -> ExitCode {
    let progress = Arc::new(Progress::default());
    watchdog(
        Arc::clone(&progress),
        args.seed,
        Duration::from_secs(args.timeout),
    );
    let mut total = 0;
    let mut elapsed = Duration::ZERO;
    for &(index, target) in selected {
        progress.target.store(index as u64, Ordering::Relaxed);
        let start = args.start;
        let report = |case: u64| {
            progress.case.store(case, Ordering::Relaxed);
            if case > start && (case - start).is_multiple_of(100_000) {
                eprintln!("progress target={} case={case}", target.name);
            }
        };
        let seed = args.seed;
        match run_on_large_stack(target, seed, start, args.cases, &report) {
            Ok(Ok(summary)) => {
                println!("{summary}");
                let secs = summary.elapsed.as_secs_f64();
                eprintln!(
                    "rate target={} cases_per_sec={:.0}",
                    summary.target,
                    summary.cases as f64 / secs.max(1e-9)
                );
                total += summary.cases;
                elapsed += summary.elapsed;
            }
            Ok(Err(failure)) => {
                print!("{failure}");
                return ExitCode::FAILURE;
            }
            Err(message) => {
                println!("FAILED target={} seed={seed}: {message}", target.name);
                return ExitCode::FAILURE;
            }
        }
    }
    println!(
        "all passed: targets={} cases={total} seed={} panics=0 elapsed={:.3}",
        selected.len(),
        args.seed,
        elapsed.as_secs_f64()
    );
    ExitCode::SUCCESS
}

/// Runs cases `start..start + cases` of `target` on a thread with a large stack: deep inputs
/// recurse in several parsers. `Err` when that thread cannot start or dies.
fn run_on_large_stack<F: Fn(u64) + Sync>(
    target: &'static rebuno_fuzz::Target,
    seed: u64,
    start: u64,
    cases: u64,
    report: &F,
) -> Result<Result<rebuno_fuzz::Summary, rebuno_fuzz::Failure>, String> {
    std::thread::scope(|scope| {
        #[allow(clippy::disallowed_methods)] // host-side harness
        let handle = std::thread::Builder::new()
            .name(target.name.to_owned())
            .stack_size(256 << 20)
            .spawn_scoped(scope, || {
                rebuno_fuzz::run(target, seed, start, cases, report)
            });
        match handle {
            Ok(handle) => handle
                .join()
                .map_err(|_| "the runner thread died".to_owned()),
            Err(error) => Err(format!("cannot start the runner thread: {error}")),
        }
    })
}
