//! The driver: starts the processes, runs the workloads interleaved, prints the medians.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::control::{Reply, Request, RunReport, WaitReport};
use crate::kernel::AGENT_ID;
use crate::proc::{cpu_seconds, open_fds, peak_rss_kib, rss_kib};
use crate::stats::median;

/// The help text.
pub(crate) const USAGE: &str = "\
rebuno-bench [WORKLOAD] [OPTIONS]

Workloads (default: all):
  all      live + replay (rust, python, floor), idle (rust, python), ack (rust, floor)
  live     N executions x K no-op tool calls, C in flight
  replay   N executions with K recorded steps, re-delivered so every step replays
  idle     M executions in flight at once, each waiting inside a tool (RSS per execution)
  ack      signed dispatches straight to the agent at a fixed rate (HTTP 200 latency)
  llm      N executions x K durable LLM calls to a stub provider in the kernel process,
           C in flight; then re-delivered so every call replays (rust, python; not in all)

Options:
  --n N             executions per live/replay run, rust and floor (default 1000)
  --n-python N      executions per live/replay run, python  (default 200)
  --k K             tool calls per execution              (default 10)
  --c C             executions in flight                  (default 16)
  --m M             idle executions in flight             (default 1000)
  --reps R          interleaved repetitions               (default 3)
  --variants LIST   comma list of rust,python,floor       (default all three)
  --ack-rate R      dispatches per second                 (default 1000)
  --ack-secs S      measured seconds per ack run          (default 5)
  --no-pin          do not pin (default with >= 2 CPUs: driver and kernel on CPU 0,
                    agent on CPU 1, via taskset -c)
  --python PATH     python of a venv with rebuno==0.29.2 and uvicorn (default: created
                    by scripts/interop-venv.sh in target/bench-venv)
  --agent-prefix S  command words put before the agent's command, e.g.
                    \"perf record -g -o /tmp/agent.data --\" (CPU figures are then perf's)
  --json PATH       also write every run's raw figures as JSON
";

/// The shared secret of the benchmark agent.
const SECRET: &str = "bench-secret";

/// One agent implementation under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Variant {
    /// rebuno-rs served by rebuno-hyper.
    Rust,
    /// The official Python SDK under uvicorn.
    Python,
    /// The bare protocol loop.
    Floor,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Self::Rust => "rust",
            Self::Python => "python",
            Self::Floor => "floor",
        }
    }

    fn parse(name: &str) -> Result<Self> {
        match name {
            "rust" => Ok(Self::Rust),
            "python" => Ok(Self::Python),
            "floor" => Ok(Self::Floor),
            other => bail!("unknown variant {other:?} (rust, python, floor)"),
        }
    }
}

/// Command-line options.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    live: bool,
    replay: bool,
    idle: bool,
    ack: bool,
    llm: bool,
    n: usize,
    n_python: usize,
    k: usize,
    c: usize,
    m: usize,
    reps: usize,
    variants: Vec<Variant>,
    ack_rate: u32,
    ack_secs: f64,
    pin: bool,
    python: Option<PathBuf>,
    agent_prefix: Vec<String>,
    json: Option<PathBuf>,
}

impl Options {
    /// Parses `[WORKLOAD] [OPTIONS]`.
    pub(crate) fn parse(args: &[String]) -> Result<Self> {
        let mut options = Self {
            live: true,
            replay: true,
            idle: true,
            ack: true,
            llm: false,
            n: 1000,
            n_python: 200,
            k: 10,
            c: 16,
            m: 1000,
            reps: 3,
            variants: vec![Variant::Rust, Variant::Python, Variant::Floor],
            ack_rate: 1000,
            ack_secs: 5.0,
            pin: true,
            python: None,
            agent_prefix: Vec::new(),
            json: None,
        };
        let mut rest = args.iter();
        let mut first = true;
        while let Some(arg) = rest.next() {
            let mut value = |name: &str| {
                rest.next()
                    .cloned()
                    .ok_or_else(|| anyhow!("{name} needs a value"))
            };
            match arg.as_str() {
                "all" if first => {}
                "live" | "replay" | "idle" | "ack" | "llm" if first => {
                    options.live = arg == "live";
                    options.replay = arg == "replay";
                    options.idle = arg == "idle";
                    options.ack = arg == "ack";
                    options.llm = arg == "llm";
                }
                "--n" => options.n = value(arg)?.parse()?,
                "--n-python" => options.n_python = value(arg)?.parse()?,
                "--k" => options.k = value(arg)?.parse()?,
                "--c" => options.c = value(arg)?.parse()?,
                "--m" => options.m = value(arg)?.parse()?,
                "--reps" => options.reps = value(arg)?.parse()?,
                "--variants" => {
                    options.variants = value(arg)?
                        .split(',')
                        .map(Variant::parse)
                        .collect::<Result<_>>()?;
                }
                "--ack-rate" => options.ack_rate = value(arg)?.parse()?,
                "--ack-secs" => options.ack_secs = value(arg)?.parse()?,
                "--no-pin" => options.pin = false,
                "--python" => options.python = Some(PathBuf::from(value(arg)?)),
                "--agent-prefix" => {
                    options.agent_prefix =
                        value(arg)?.split_whitespace().map(str::to_owned).collect();
                }
                "--json" => options.json = Some(PathBuf::from(value(arg)?)),
                other => bail!("unknown argument {other:?}\n\n{USAGE}"),
            }
            first = false;
        }
        if options.n == 0
            || options.n_python == 0
            || options.k == 0
            || options.c == 0
            || options.reps == 0
        {
            bail!("--n, --k, --c and --reps must be positive");
        }
        Ok(options)
    }
}

/// Raw figures: (variant, metric) → one value per repetition.
type Figures = BTreeMap<(Variant, &'static str), Vec<f64>>;

fn record(figures: &mut Figures, variant: Variant, metric: &'static str, value: f64) {
    figures.entry((variant, metric)).or_default().push(value);
}

/// Runs the benchmark and prints the report.
pub(crate) async fn run(options: Options) -> Result<()> {
    let started = Instant::now();
    let load_before = loadavg();
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let pin = options.pin && cpus >= 2 && which("taskset");
    if options.pin && !pin {
        eprintln!("note: not pinning (needs taskset and at least 2 CPUs)");
    }
    if pin {
        // The driver (and with it the ack sender) shares CPU 0 with the kernel.
        let status = std::process::Command::new("taskset")
            .args(["-a", "-p", "-c", "0", &std::process::id().to_string()])
            .stdout(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("taskset could not pin the driver");
        }
    }
    let python = if options.variants.contains(&Variant::Python)
        && (options.live || options.replay || options.idle || options.llm)
    {
        Some(python(&options)?)
    } else {
        None
    };
    let env = Env {
        options: options.clone(),
        pin,
        python,
    };
    let mut figures = Figures::new();
    for rep in 0..options.reps {
        let mut order = options.variants.clone();
        let turn = rep % order.len().max(1);
        order.rotate_left(turn);
        if options.live || options.replay {
            for &variant in &order {
                eprintln!(
                    "rep {}/{}: live/replay {}",
                    rep + 1,
                    options.reps,
                    variant.name()
                );
                env.live_replay(variant, false, &mut figures).await?;
            }
        }
        if options.idle {
            for &variant in order.iter().filter(|v| **v != Variant::Floor) {
                eprintln!("rep {}/{}: idle {}", rep + 1, options.reps, variant.name());
                env.idle(variant, &mut figures).await?;
            }
        }
        if options.llm {
            for &variant in order.iter().filter(|v| **v != Variant::Floor) {
                eprintln!("rep {}/{}: llm {}", rep + 1, options.reps, variant.name());
                env.live_replay(variant, true, &mut figures).await?;
            }
        }
        if options.ack {
            for &variant in order.iter().filter(|v| **v != Variant::Python) {
                eprintln!("rep {}/{}: ack {}", rep + 1, options.reps, variant.name());
                env.ack(variant, &mut figures).await?;
            }
        }
    }
    print_report(&env, &figures, cpus, started.elapsed());
    println!("load average before: {load_before}; after: {}", loadavg());
    if let Some(path) = &options.json {
        let raw: BTreeMap<String, &Vec<f64>> = figures
            .iter()
            .map(|((variant, metric), values)| (format!("{}.{metric}", variant.name()), values))
            .collect();
        std::fs::write(path, serde_json::to_vec_pretty(&raw)?)
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

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Python interpreter: `--python`, `REBUNO_BENCH_PYTHON`, or a venv made by
/// `scripts/interop-venv.sh` in `target/bench-venv`.
fn python(options: &Options) -> Result<PathBuf> {
    if let Some(path) = options
        .python
        .clone()
        .or_else(|| std::env::var_os("REBUNO_BENCH_PYTHON").map(PathBuf::from))
    {
        return Ok(path);
    }
    let root = repo_root();
    let script = root.join("scripts/interop-venv.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg(root.join("target/bench-venv"))
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!("{} failed: {}", script.display(), out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let path = PathBuf::from(text.lines().last().unwrap_or_default().trim());
    if !path.is_file() {
        bail!("{} printed no python path", script.display());
    }
    Ok(path)
}

/// A child process, killed when dropped.
struct Proc {
    child: Child,
    label: String,
}

impl Proc {
    fn pid(&self) -> Result<u32> {
        self.child
            .id()
            .ok_or_else(|| anyhow!("{} already exited", self.label))
    }

    fn cpu(&self) -> Result<f64> {
        cpu_seconds(self.pid()?)
    }

    /// Closes its stdin (the agents exit on that, so a `perf record` prefix can write its
    /// data), waits up to 10 s, then kills it.
    async fn stop(mut self) {
        drop(self.child.stdin.take());
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// The kernel process and its control channel.
struct KernelProc {
    proc: Proc,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    url: String,
}

impl KernelProc {
    async fn request(&mut self, request: &Request) -> Result<Reply> {
        let mut line = serde_json::to_vec(request)?;
        line.push(b'\n');
        self.stdin.write_all(&line).await?;
        self.stdin.flush().await?;
        let reply = self
            .lines
            .next_line()
            .await?
            .ok_or_else(|| anyhow!("the kernel process exited"))?;
        match serde_json::from_str(&reply)? {
            Reply::Error(message) => bail!("kernel: {message}"),
            reply => Ok(reply),
        }
    }

    async fn run(&mut self, request: &Request) -> Result<RunReport> {
        match self.request(request).await? {
            Reply::Run(report) => {
                if report.failed > 0 {
                    bail!(
                        "{} executions failed, e.g. {}",
                        report.failed,
                        report.first_failure.unwrap_or_default()
                    );
                }
                Ok(report)
            }
            other => bail!("unexpected reply {other:?}"),
        }
    }

    async fn wait(&mut self, request: &Request) -> Result<WaitReport> {
        match self.request(request).await? {
            Reply::Wait(report) => Ok(report),
            other => bail!("unexpected reply {other:?}"),
        }
    }

    async fn quit(mut self) {
        let _ = self.request(&Request::Quit).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.proc.child.wait()).await;
    }
}

/// Everything a run needs.
struct Env {
    options: Options,
    pin: bool,
    python: Option<PathBuf>,
}

impl Env {
    fn command(&self, cpu: &str, prefix: &[String], program: &Path) -> Command {
        let mut words: Vec<std::ffi::OsString> = Vec::new();
        if self.pin {
            words.extend(["taskset".into(), "-c".into(), cpu.into()]);
        }
        words.extend(prefix.iter().map(Into::into));
        words.push(program.into());
        let mut command = Command::new(&words[0]);
        command.args(&words[1..]).kill_on_drop(true);
        command
    }

    async fn kernel(&self) -> Result<KernelProc> {
        let exe = std::env::current_exe()?;
        let mut child = self
            .command("0", &[], &exe)
            .arg("kernel")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting the kernel process")?;
        let stdin = child.stdin.take().context("kernel stdin")?;
        let stdout = child.stdout.take().context("kernel stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let first = lines
            .next_line()
            .await?
            .ok_or_else(|| anyhow!("the kernel process exited at start"))?;
        let Reply::Ready(url) = serde_json::from_str(&first)? else {
            bail!("kernel said {first}");
        };
        Ok(KernelProc {
            proc: Proc {
                child,
                label: "kernel".to_owned(),
            },
            stdin,
            lines,
            url,
        })
    }

    /// Starts `variant`'s agent against `kernel_url`; returns it and its webhook URL.
    async fn agent(&self, variant: Variant, kernel_url: &str) -> Result<(Proc, String)> {
        let prefix = &self.options.agent_prefix;
        match variant {
            Variant::Rust | Variant::Floor => {
                let exe = std::env::current_exe()?;
                let mut child = self
                    .command("1", prefix, &exe)
                    .args([
                        if variant == Variant::Rust {
                            "agent"
                        } else {
                            "floor"
                        },
                        kernel_url,
                        SECRET,
                    ])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::inherit())
                    .spawn()
                    .context("starting the agent process")?;
                let stdout = child.stdout.take().context("agent stdout")?;
                let mut lines = BufReader::new(stdout).lines();
                let url = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
                    .await
                    .context("agent start timed out")??
                    .ok_or_else(|| anyhow!("the agent process exited at start"))?;
                // Keep reading (and dropping) anything else it prints.
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                let label = variant.name().to_owned();
                Ok((Proc { child, label }, url))
            }
            Variant::Python => {
                let python = self.python.as_ref().context("no python")?;
                let port = free_port()?;
                let log = std::env::temp_dir().join(format!("rebuno-bench-python-{port}.log"));
                let out = std::fs::File::create(&log)?;
                let child = self
                    .command("1", prefix, python)
                    .args(["-m", "uvicorn", "agent:app", "--app-dir"])
                    .arg(Path::new(env!("CARGO_MANIFEST_DIR")))
                    .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                    .args(["--log-level", "warning", "--no-access-log"])
                    .env("REBUNO_URL", kernel_url)
                    .env("REBUNO_AGENT_SECRET", SECRET)
                    .env("PYTHONDONTWRITEBYTECODE", "1")
                    .env_remove("REBUNO_API_KEY")
                    .stdin(Stdio::piped())
                    .stdout(out.try_clone()?)
                    .stderr(out)
                    .spawn()
                    .context("starting the python agent")?;
                let deadline = Instant::now() + Duration::from_secs(30);
                while tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_err()
                {
                    if Instant::now() > deadline {
                        let tail = std::fs::read_to_string(&log).unwrap_or_default();
                        bail!("the python agent is not listening on {port}:\n{tail}");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                let label = "python".to_owned();
                Ok((
                    Proc { child, label },
                    format!("http://127.0.0.1:{port}/webhook"),
                ))
            }
        }
    }

    /// Fresh kernel + agent, registered and warmed up.
    async fn world(&self, variant: Variant, warm: Request) -> Result<(KernelProc, Proc)> {
        let mut kernel = self.kernel().await?;
        let url = kernel.url.clone();
        let (agent, webhook) = self.agent(variant, &url).await?;
        kernel
            .request(&Request::Register {
                agent_id: AGENT_ID.to_owned(),
                webhook_url: webhook,
                secret: SECRET.to_owned(),
            })
            .await?;
        kernel.run(&warm).await.context("warm-up")?;
        Ok((kernel, agent))
    }

    /// Live and replay phases (tool calls, or LLM calls with `llm`) against one fresh world.
    async fn live_replay(&self, variant: Variant, llm: bool, figures: &mut Figures) -> Result<()> {
        let Options { k, c, .. } = self.options;
        let n = if variant == Variant::Python {
            self.options.n_python
        } else {
            self.options.n
        };
        let warm = Request::Live {
            n: (2 * c).max(20),
            k,
            c,
            llm,
        };
        let (mut kernel, agent) = self.world(variant, warm).await?;
        let (live, replay) = if llm {
            (&LLM, &LLM_REPLAY)
        } else {
            (&LIVE, &REPLAY)
        };
        if llm || self.options.live {
            let request = Request::Live { n, k, c, llm };
            measure_live(&mut kernel, &agent, variant, &request, live, figures).await?;
        }
        if llm || self.options.replay {
            kernel.wait(&Request::Hold { n, k, c, llm }).await?;
            measure_replay(&mut kernel, &agent, variant, c, replay, figures).await?;
        }
        kernel.quit().await;
        agent.stop().await;
        Ok(())
    }

    async fn idle(&self, variant: Variant, figures: &mut Figures) -> Result<()> {
        for paced in [false, true] {
            let m = self.options.m;
            let warm = Request::Live {
                n: 20,
                k: 1,
                c: 4,
                llm: false,
            };
            let (mut kernel, agent) = self.world(variant, warm).await?;
            tokio::time::sleep(Duration::from_millis(300)).await;
            let pid = agent.pid()?;
            let (before, fds_before) = (rss_kib(pid)?, open_fds(pid)?);
            kernel.wait(&Request::Idle { m, paced }).await?;
            tokio::time::sleep(Duration::from_millis(300)).await;
            let (after, fds_after) = (rss_kib(pid)?, open_fds(pid)?);
            let per = (after.saturating_sub(before) * 1024) as f64 / m as f64;
            let fds = (fds_after as f64 - fds_before as f64) / m as f64;
            let (bytes, sockets) = if paced {
                ("idle_paced_bytes_per_exec", "idle_paced_fds_per_exec")
            } else {
                ("idle_bytes_per_exec", "idle_fds_per_exec")
            };
            record(figures, variant, bytes, per);
            record(figures, variant, sockets, fds);
            eprintln!(
                "  idle{}: {before} KiB -> {after} KiB with {m} in flight: {per:.0} B each; open fds {fds_before} -> {fds_after}",
                if paced { " (paced)" } else { "" }
            );
            if !paced {
                settled(pid, m, (before, fds_before), variant, figures).await?;
            }
            kernel.quit().await;
            agent.stop().await;
        }
        Ok(())
    }

    async fn ack(&self, variant: Variant, figures: &mut Figures) -> Result<()> {
        let stub = crate::ack::stub_kernel().await?;
        let (agent, webhook) = self.agent(variant, &stub).await?;
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
        record(figures, variant, "ack_p50_ms", report.p50_ms);
        record(figures, variant, "ack_p99_ms", report.p99_ms);
        record(figures, variant, "ack_max_ms", report.max_ms);
        record(figures, variant, "ack_send_p50_ms", report.send_p50_ms);
        record(figures, variant, "ack_send_p99_ms", report.send_p99_ms);
        record(
            figures,
            variant,
            "ack_cpu_us_per_dispatch",
            (cpu1 - cpu0) * 1e6 / total,
        );
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

/// The metric names of one live phase.
struct LiveMetrics {
    /// What the progress line calls the phase.
    label: &'static str,
    cpu: &'static str,
    kernel_cpu: &'static str,
    execs: &'static str,
    steps: &'static str,
    p50: &'static str,
    p99: &'static str,
    between: &'static str,
    within: &'static str,
    rss: &'static str,
}

/// No-op tool calls.
const LIVE: LiveMetrics = LiveMetrics {
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
};

/// Durable LLM calls to the stub provider.
const LLM: LiveMetrics = LiveMetrics {
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
};

/// The metric names of one replay phase.
struct ReplayMetrics {
    /// What the progress line calls the phase.
    label: &'static str,
    cpu: &'static str,
    kernel_cpu: &'static str,
    steps: &'static str,
    p50: &'static str,
    p99: &'static str,
}

/// Replayed tool calls.
const REPLAY: ReplayMetrics = ReplayMetrics {
    label: "replay",
    cpu: "replay_cpu_us_per_step",
    kernel_cpu: "replay_kernel_cpu_us_per_step",
    steps: "replay_steps_per_s",
    p50: "replay_step_p50_ms",
    p99: "replay_step_p99_ms",
};

/// Replayed LLM calls.
const LLM_REPLAY: ReplayMetrics = ReplayMetrics {
    label: "llm-replay",
    cpu: "llm_replay_cpu_us_per_step",
    kernel_cpu: "llm_replay_kernel_cpu_us_per_step",
    steps: "llm_replay_steps_per_s",
    p50: "llm_replay_step_p50_ms",
    p99: "llm_replay_step_p99_ms",
};

/// Runs `request` (a [`Request::Live`]) and records its figures under `names`.
async fn measure_live(
    kernel: &mut KernelProc,
    agent: &Proc,
    variant: Variant,
    request: &Request,
    names: &LiveMetrics,
    figures: &mut Figures,
) -> Result<()> {
    let &Request::Live { n, k, llm, .. } = request else {
        bail!("measure_live needs a live request");
    };
    let (cpu0, kcpu0) = (agent.cpu()?, kernel.proc.cpu()?);
    let report = kernel.run(request).await?;
    let (cpu1, kcpu1) = (agent.cpu()?, kernel.proc.cpu()?);
    let steps = (n * k) as f64;
    let (cpu, kcpu) = ((cpu1 - cpu0) * 1e6 / steps, (kcpu1 - kcpu0) * 1e6 / steps);
    let or_nan = |value: Option<f64>| value.unwrap_or(f64::NAN);
    let mut put = |metric, value| record(figures, variant, metric, value);
    put(names.cpu, cpu);
    put(names.kernel_cpu, kcpu);
    put(names.execs, n as f64 / report.elapsed_s);
    put(names.steps, steps / report.elapsed_s);
    put(names.p50, or_nan(report.step_p50_ms));
    put(names.between, or_nan(report.between_p50_ms));
    put(names.within, or_nan(report.within_p50_ms));
    put(names.p99, or_nan(report.step_p99_ms));
    put(names.rss, peak_rss_kib(agent.pid()?)? as f64);
    if report.steps != n * k {
        eprintln!(
            "warning: {} steps recorded, expected {}",
            report.steps,
            n * k
        );
    }
    warn_provider_calls(report.provider_calls, if llm { n * k } else { 0 });
    eprintln!(
        "  {}: {:.0} exec/s, {cpu:.1} µs agent CPU/step ({kcpu:.1} kernel), p50 {:.2} ms",
        names.label,
        n as f64 / report.elapsed_s,
        or_nan(report.step_p50_ms)
    );
    Ok(())
}

/// Re-delivers the held executions (`c` at a time) and records the replay's figures under `names`.
async fn measure_replay(
    kernel: &mut KernelProc,
    agent: &Proc,
    variant: Variant,
    c: usize,
    names: &ReplayMetrics,
    figures: &mut Figures,
) -> Result<()> {
    let (cpu0, kcpu0) = (agent.cpu()?, kernel.proc.cpu()?);
    let report = kernel.run(&Request::Redeliver { c }).await?;
    let (cpu1, kcpu1) = (agent.cpu()?, kernel.proc.cpu()?);
    let steps = report.steps.max(1) as f64;
    let (cpu, kcpu) = ((cpu1 - cpu0) * 1e6 / steps, (kcpu1 - kcpu0) * 1e6 / steps);
    let mut put = |metric, value| record(figures, variant, metric, value);
    put(names.cpu, cpu);
    put(names.kernel_cpu, kcpu);
    put(names.steps, steps / report.elapsed_s);
    put(names.p50, report.step_p50_ms.unwrap_or(f64::NAN));
    put(names.p99, report.step_p99_ms.unwrap_or(f64::NAN));
    warn_provider_calls(report.provider_calls, 0);
    eprintln!(
        "  {}: {:.0} steps/s, {cpu:.1} µs agent CPU/step ({kcpu:.1} kernel)",
        names.label,
        steps / report.elapsed_s,
    );
    Ok(())
}

/// Warns when the stub provider was asked `calls` times rather than `expected`.
fn warn_provider_calls(calls: usize, expected: usize) {
    if calls != expected {
        eprintln!("warning: the stub provider answered {calls} requests, expected {expected}");
    }
}

fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// The 1, 5 and 15 minute load averages (other work on the machine skews every figure).
fn loadavg() -> String {
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

/// How a figure compares across variants, and its target.
struct Row {
    label: &'static str,
    metric: &'static str,
    scale: f64,
    decimals: usize,
    target: &'static str,
}

fn print_report(env: &Env, figures: &Figures, cpus: usize, took: Duration) {
    let o = &env.options;
    let get = |variant: Variant, metric: &str| -> f64 {
        figures
            .iter()
            .find(|((v, m), _)| *v == variant && *m == metric)
            .map_or(f64::NAN, |(_, values)| median(values.iter().copied()))
    };
    println!();
    println!(
        "rebuno-bench: {cpus} CPUs ({}), pinned: {}; N={} (python {}) K={} C={} M={} reps={} ack {}/s x {} s; took {:.0} s",
        cpu_model(),
        env.pin,
        o.n,
        o.n_python,
        o.k,
        o.c,
        o.m,
        o.reps,
        o.ack_rate,
        o.ack_secs,
        took.as_secs_f64()
    );
    println!("medians of {} interleaved repetitions", o.reps);
    println!();
    let rows = [
        Row {
            label: "agent CPU per live step (µs)",
            metric: "live_cpu_us_per_step",
            scale: 1.0,
            decimals: 1,
            target: "≤ python/20, ≤ 1.5× floor",
        },
        Row {
            label: "agent CPU per replayed step (µs)",
            metric: "replay_cpu_us_per_step",
            scale: 1.0,
            decimals: 1,
            target: "",
        },
        Row {
            label: "executions/s (live)",
            metric: "live_execs_per_s",
            scale: 1.0,
            decimals: 0,
            target: "≥ 20× python",
        },
        Row {
            label: "steps/s (live)",
            metric: "live_steps_per_s",
            scale: 1.0,
            decimals: 0,
            target: "",
        },
        Row {
            label: "steps/s (replay)",
            metric: "replay_steps_per_s",
            scale: 1.0,
            decimals: 0,
            target: "",
        },
        Row {
            label: "live step latency p50 (ms)",
            metric: "live_step_p50_ms",
            scale: 1.0,
            decimals: 3,
            target: "",
        },
        Row {
            label: "live step latency p99 (ms)",
            metric: "live_step_p99_ms",
            scale: 1.0,
            decimals: 3,
            target: "",
        },
        Row {
            label: "  of which: complete→next submit p50",
            metric: "live_between_steps_p50_ms",
            scale: 1.0,
            decimals: 3,
            target: "",
        },
        Row {
            label: "  of which: submit→complete p50",
            metric: "live_within_step_p50_ms",
            scale: 1.0,
            decimals: 3,
            target: "",
        },
        Row {
            label: "replayed step latency p50 (ms)",
            metric: "replay_step_p50_ms",
            scale: 1.0,
            decimals: 3,
            target: "",
        },
        Row {
            label: "replayed step latency p99 (ms)",
            metric: "replay_step_p99_ms",
            scale: 1.0,
            decimals: 3,
            target: "",
        },
        Row {
            label: "agent peak RSS (MiB)",
            metric: "live_peak_rss_kib",
            scale: 1.0 / 1024.0,
            decimals: 1,
            target: "",
        },
        Row {
            label: "RSS per idle in-flight exec (KB)",
            metric: "idle_bytes_per_exec",
            scale: 1e-3,
            decimals: 2,
            target: "≤ 10 KB",
        },
        Row {
            label: "  agent sockets per idle exec",
            metric: "idle_fds_per_exec",
            scale: 1.0,
            decimals: 2,
            target: "",
        },
        Row {
            label: "  RSS per idle exec, 7 s later (KB)",
            metric: "idle_settled_bytes_per_exec",
            scale: 1e-3,
            decimals: 2,
            target: "",
        },
        Row {
            label: "  agent sockets per idle exec, 7 s later",
            metric: "idle_settled_fds_per_exec",
            scale: 1.0,
            decimals: 2,
            target: "",
        },
        Row {
            label: "RSS per idle exec, paced (KB)",
            metric: "idle_paced_bytes_per_exec",
            scale: 1e-3,
            decimals: 2,
            target: "≤ 10 KB",
        },
        Row {
            label: "  agent sockets per idle exec, paced",
            metric: "idle_paced_fds_per_exec",
            scale: 1.0,
            decimals: 3,
            target: "",
        },
        Row {
            label: "kernel CPU per live step (µs)",
            metric: "live_kernel_cpu_us_per_step",
            scale: 1.0,
            decimals: 1,
            target: "",
        },
        Row {
            label: "agent CPU per LLM call (µs)",
            metric: "llm_cpu_us_per_step",
            scale: 1.0,
            decimals: 1,
            target: "",
        },
        Row {
            label: "agent CPU per replayed LLM call (µs)",
            metric: "llm_replay_cpu_us_per_step",
            scale: 1.0,
            decimals: 1,
            target: "",
        },
        Row {
            label: "executions/s (llm)",
            metric: "llm_execs_per_s",
            scale: 1.0,
            decimals: 0,
            target: "",
        },
        Row {
            label: "LLM calls/s",
            metric: "llm_steps_per_s",
            scale: 1.0,
            decimals: 0,
            target: "",
        },
        Row {
            label: "replayed LLM calls/s",
            metric: "llm_replay_steps_per_s",
            scale: 1.0,
            decimals: 0,
            target: "",
        },
        Row {
            label: "LLM step latency p50 (ms)",
            metric: "llm_step_p50_ms",
            scale: 1.0,
            decimals: 3,
            target: "",
        },
        Row {
            label: "LLM step latency p99 (ms)",
            metric: "llm_step_p99_ms",
            scale: 1.0,
            decimals: 3,
            target: "",
        },
        Row {
            label: "  of which: complete→next submit p50",
            metric: "llm_between_steps_p50_ms",
            scale: 1.0,
            decimals: 3,
            target: "",
        },
        Row {
            label: "  of which: submit→complete p50",
            metric: "llm_within_step_p50_ms",
            scale: 1.0,
            decimals: 3,
            target: "",
        },
        Row {
            label: "replayed LLM step latency p50 (ms)",
            metric: "llm_replay_step_p50_ms",
            scale: 1.0,
            decimals: 3,
            target: "",
        },
        Row {
            label: "replayed LLM step latency p99 (ms)",
            metric: "llm_replay_step_p99_ms",
            scale: 1.0,
            decimals: 3,
            target: "",
        },
        Row {
            label: "agent peak RSS, llm (MiB)",
            metric: "llm_peak_rss_kib",
            scale: 1.0 / 1024.0,
            decimals: 1,
            target: "",
        },
        Row {
            label: "kernel+stub CPU per LLM call (µs)",
            metric: "llm_kernel_cpu_us_per_step",
            scale: 1.0,
            decimals: 1,
            target: "",
        },
        Row {
            label: "ack latency p50, from schedule (ms)",
            metric: "ack_p50_ms",
            scale: 1.0,
            decimals: 3,
            target: "",
        },
        Row {
            label: "ack latency p99, from schedule (ms)",
            metric: "ack_p99_ms",
            scale: 1.0,
            decimals: 3,
            target: "≤ 2 ms at 1000/s",
        },
        Row {
            label: "ack latency max (ms)",
            metric: "ack_max_ms",
            scale: 1.0,
            decimals: 3,
            target: "",
        },
        Row {
            label: "ack latency from send p50 (ms)",
            metric: "ack_send_p50_ms",
            scale: 1.0,
            decimals: 3,
            target: "",
        },
        Row {
            label: "ack latency from send p99 (ms)",
            metric: "ack_send_p99_ms",
            scale: 1.0,
            decimals: 3,
            target: "",
        },
        Row {
            label: "agent CPU per ack (µs)",
            metric: "ack_cpu_us_per_dispatch",
            scale: 1.0,
            decimals: 1,
            target: "",
        },
    ];
    println!(
        "| {:<34} | {:>10} | {:>10} | {:>10} | {:>9} | {:>9} | target |",
        "figure", "rust", "python", "floor", "rust/py", "rust/floor"
    );
    println!(
        "|{:-<36}|{:-<12}|{:-<12}|{:-<12}|{:-<11}|{:-<12}|{:-<28}|",
        "", "", "", "", "", "", ""
    );
    let cell = |value: f64, decimals: usize| {
        if value.is_finite() {
            format!("{value:.decimals$}")
        } else {
            "-".to_owned()
        }
    };
    for row in rows {
        let values = [Variant::Rust, Variant::Python, Variant::Floor]
            .map(|variant| get(variant, row.metric) * row.scale);
        if values.iter().all(|v| !v.is_finite()) {
            continue;
        }
        let ratio = |other: f64| {
            let r = values[0] / other;
            if r.is_finite() {
                format!("{r:.3}")
            } else {
                "-".to_owned()
            }
        };
        println!(
            "| {:<34} | {:>10} | {:>10} | {:>10} | {:>9} | {:>10} | {} |",
            row.label,
            cell(values[0], row.decimals),
            cell(values[1], row.decimals),
            cell(values[2], row.decimals),
            ratio(values[1]),
            ratio(values[2]),
            row.target
        );
    }
    println!();
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    let (rc, pc, fc) = (
        get(Variant::Rust, "live_cpu_us_per_step"),
        get(Variant::Python, "live_cpu_us_per_step"),
        get(Variant::Floor, "live_cpu_us_per_step"),
    );
    if rc.is_finite() && pc.is_finite() {
        println!(
            "target agent CPU/live step ≤ 1/20 python: rust/python = 1/{:.1}: {}",
            pc / rc,
            verdict(rc * 20.0 <= pc)
        );
    }
    if rc.is_finite() && fc.is_finite() {
        println!(
            "target agent CPU/live step ≤ 1.5× floor: rust/floor = {:.2}×: {}",
            rc / fc,
            verdict(rc <= 1.5 * fc)
        );
    }
    let (re, pe) = (
        get(Variant::Rust, "live_execs_per_s"),
        get(Variant::Python, "live_execs_per_s"),
    );
    if re.is_finite() && pe.is_finite() {
        println!(
            "target executions/s ≥ 20× python: {:.1}×: {}",
            re / pe,
            verdict(re >= 20.0 * pe)
        );
    }
    let ack = get(Variant::Rust, "ack_p99_ms");
    if ack.is_finite() {
        println!(
            "target ack p99 ≤ 2 ms at {}/s: {ack:.3} ms: {}",
            o.ack_rate,
            verdict(ack <= 2.0)
        );
    }
    let paced = get(Variant::Rust, "idle_paced_bytes_per_exec");
    if paced.is_finite() {
        println!(
            "target ≤ 10 KB per idle in-flight execution (paced): {:.2} KB: {}",
            paced / 1e3,
            verdict(paced <= 10_000.0)
        );
    }
    let idle = get(Variant::Rust, "idle_bytes_per_exec");
    if idle.is_finite() {
        println!(
            "target ≤ 10 KB per idle in-flight execution: {:.2} KB: {}",
            idle / 1e3,
            verdict(idle <= 10_000.0)
        );
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
    variant: Variant,
    figures: &mut Figures,
) -> Result<()> {
    tokio::time::sleep(SETTLE).await;
    let (after, fds_after) = (rss_kib(pid)?, open_fds(pid)?);
    let per = (after.saturating_sub(before) * 1024) as f64 / m as f64;
    let fds = (fds_after as f64 - fds_before as f64) / m as f64;
    record(figures, variant, "idle_settled_bytes_per_exec", per);
    record(figures, variant, "idle_settled_fds_per_exec", fds);
    eprintln!(
        "  idle after {SETTLE:?}: {after} KiB: {per:.0} B each; open fds {fds_before} -> {fds_after}"
    );
    Ok(())
}
