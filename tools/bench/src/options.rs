//! The command line: workloads, variants, setups and sizes.

use std::path::PathBuf;

use anyhow::{Result, anyhow, bail};

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

Setups (--setup, a comma list, default all five; every figure is reported per setup):
  pinned    full load: driver and kernel on CPU 0, agent on CPU 1 (taskset -c); the kernel
            process creates the executions, C at a time, and waits on them in-process
  deployed  nothing pinned; the driver creates the executions and waits on them through
            rebuno::client::Client over HTTP (its wait polls: 50 ms doubling to 1 s)
  light     placed as pinned; the same arrival rate offered to every agent (--rate executions
            per second, however many are in flight): the live workload only, every variant
            on both runtimes
  remote    placed as pinned, C in flight, every kernel request and every webhook through a
            loopback proxy that delays each answer by --delay-ms (a kernel across a network):
            the live workload only, every variant on both runtimes
  lambda    one execution at a time (as one Lambda sandbox runs them), the agent on a
            current-thread runtime, the kernel remote as above: the live workload only
  (both = pinned,deployed)

Options:
  --n N             executions per live/replay run, rust and floor (default 1000)
  --n-python N      executions per live/replay run, python  (default 200)
  --k K             tool calls per execution              (default 10)
  --c C             executions in flight, pinned setup    (default 16)
  --c-deployed C    executions in flight, deployed setup  (default 64: enough to keep the
                    agent busy although Client::wait polls)
  --rate R          executions started per second, light setup (default 10: below every
                    variant's capacity, python's included, on a 2-core machine)
  --n-light N       executions per light run, every variant (default 200)
  --n-lambda N      executions per lambda run, one at a time (default 300)
  --delay-ms D      the answer delay of the remote and lambda setups' proxy (default 1)
  --m M             idle executions in flight             (default 1000)
  --reps R          interleaved repetitions               (default 3)
  --variants LIST   comma list of rust,python,floor       (default all three)
  --setup S         pinned, deployed or both              (default both)
  --agent-runtime R the Tokio runtime of the rust and floor agents: multi (a multi-thread
                    runtime, one worker per CPU, as #[tokio::main]), current (a
                    current-thread runtime; variants rust-ct, floor-ct) or both (default multi)
  --ack-rate R      dispatches per second                 (default 1000)
  --ack-secs S      measured seconds per ack run          (default 5)
  --no-pin          do not pin in the pinned setup (default with >= 2 CPUs: driver and
                    kernel on CPU 0, agent on CPU 1, via taskset -c)
  --python PATH     python of a venv with rebuno==0.29.2 and uvicorn (default: created
                    by scripts/interop-venv.sh in target/bench-venv)
  --agent-prefix S  command words put before the agent's command, e.g.
                    \"perf record -g -o /tmp/agent.data --\" (CPU figures are then perf's)
  --json PATH       also write every run's raw figures as JSON (keys setup.variant.metric)
";

/// One agent implementation under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Variant {
    /// rebuno-rs served by rebuno-hyper, multi-thread Tokio runtime.
    Rust,
    /// The same on a current-thread Tokio runtime.
    RustCt,
    /// The official Python SDK under uvicorn.
    Python,
    /// The bare protocol loop, multi-thread Tokio runtime.
    Floor,
    /// The same on a current-thread Tokio runtime.
    FloorCt,
}

impl Variant {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Rust => "rust",
            Self::RustCt => "rust-ct",
            Self::Python => "python",
            Self::Floor => "floor",
            Self::FloorCt => "floor-ct",
        }
    }

    /// The SDK agent (either runtime).
    pub(crate) fn is_rust(self) -> bool {
        matches!(self, Self::Rust | Self::RustCt)
    }

    /// The protocol floor (either runtime).
    pub(crate) fn is_floor(self) -> bool {
        matches!(self, Self::Floor | Self::FloorCt)
    }

    /// Whether the agent process is this binary (allocation counters available).
    pub(crate) fn is_native(self) -> bool {
        self != Self::Python
    }

    /// The Tokio runtime argument of a native agent.
    pub(crate) fn runtime_arg(self) -> &'static str {
        match self {
            Self::RustCt | Self::FloorCt => "current",
            _ => "multi",
        }
    }

    /// The floor to compare a rust variant with: the one on the same runtime.
    pub(crate) fn floor_of(self) -> Self {
        if self == Self::RustCt {
            Self::FloorCt
        } else {
            Self::Floor
        }
    }

    fn on_runtime(self, current: bool) -> Self {
        match (self, current) {
            (Self::Rust | Self::RustCt, false) => Self::Rust,
            (Self::Rust | Self::RustCt, true) => Self::RustCt,
            (Self::Floor | Self::FloorCt, false) => Self::Floor,
            (Self::Floor | Self::FloorCt, true) => Self::FloorCt,
            (Self::Python, _) => Self::Python,
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

/// How the processes are placed, who creates the executions, and at which load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Setup {
    /// Driver + kernel on CPU 0, agent on CPU 1; the kernel process creates and waits, `C`
    /// executions in flight (full load).
    Pinned,
    /// Nothing pinned; the driver creates and waits through `rebuno::client::Client`.
    Deployed,
    /// Placed as pinned; executions started at a fixed rate (light load).
    Light,
    /// Placed as pinned, `C` in flight, the kernel behind a delaying proxy.
    Remote,
    /// One execution at a time on a current-thread runtime, the kernel behind the proxy.
    Lambda,
}

impl Setup {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Pinned => "pinned",
            Self::Deployed => "deployed",
            Self::Light => "light",
            Self::Remote => "remote",
            Self::Lambda => "lambda",
        }
    }

    /// Whether the driver and kernel share CPU 0 and the agent has CPU 1 (when pinning).
    pub(crate) fn is_pinned(self) -> bool {
        self != Self::Deployed
    }

    /// Whether only the live workload runs (the loads added to the two original setups).
    pub(crate) fn live_only(self) -> bool {
        matches!(self, Self::Light | Self::Remote | Self::Lambda)
    }

    /// Whether the kernel sits behind the delaying proxy.
    pub(crate) fn is_remote(self) -> bool {
        matches!(self, Self::Remote | Self::Lambda)
    }

    fn parse(name: &str) -> Result<Vec<Self>> {
        Ok(match name {
            "pinned" => vec![Self::Pinned],
            "deployed" => vec![Self::Deployed],
            "light" => vec![Self::Light],
            "remote" => vec![Self::Remote],
            "lambda" => vec![Self::Lambda],
            "both" => vec![Self::Pinned, Self::Deployed],
            "all" => Self::ALL.to_vec(),
            other => bail!(
                "unknown setup {other:?} (pinned, deployed, light, remote, lambda, both, all)"
            ),
        })
    }

    const ALL: [Self; 5] = [
        Self::Pinned,
        Self::Deployed,
        Self::Light,
        Self::Remote,
        Self::Lambda,
    ];
}

/// Command-line options.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) live: bool,
    pub(crate) replay: bool,
    pub(crate) idle: bool,
    pub(crate) ack: bool,
    pub(crate) llm: bool,
    pub(crate) n: usize,
    pub(crate) n_python: usize,
    pub(crate) k: usize,
    pub(crate) c: usize,
    pub(crate) c_deployed: usize,
    pub(crate) m: usize,
    pub(crate) reps: usize,
    /// With the runtime variants expanded, in column order.
    pub(crate) variants: Vec<Variant>,
    /// As given, before the runtimes expanded them.
    pub(crate) asked: Vec<Variant>,
    pub(crate) setups: Vec<Setup>,
    pub(crate) ack_rate: u32,
    pub(crate) ack_secs: f64,
    /// Executions started per second in the light setup.
    pub(crate) rate: f64,
    pub(crate) n_light: usize,
    pub(crate) n_lambda: usize,
    /// The remote proxy's delay of each answer, in milliseconds.
    pub(crate) delay_ms: f64,
    pub(crate) pin: bool,
    pub(crate) python: Option<PathBuf>,
    pub(crate) agent_prefix: Vec<String>,
    pub(crate) json: Option<PathBuf>,
}

impl Default for Options {
    /// Every workload but `llm`, on every setup, with the sizes BENCHMARKS.md quotes.
    fn default() -> Self {
        Self {
            live: true,
            replay: true,
            idle: true,
            ack: true,
            llm: false,
            n: 1000,
            n_python: 200,
            k: 10,
            c: 16,
            c_deployed: 64,
            m: 1000,
            reps: 3,
            variants: vec![Variant::Rust, Variant::Python, Variant::Floor],
            asked: Vec::new(),
            setups: Setup::ALL.to_vec(),
            ack_rate: 1000,
            ack_secs: 5.0,
            rate: 10.0,
            n_light: 200,
            n_lambda: 300,
            delay_ms: 1.0,
            pin: true,
            python: None,
            agent_prefix: Vec::new(),
            json: None,
        }
    }
}

impl Options {
    /// Parses `[WORKLOAD] [OPTIONS]`.
    pub(crate) fn parse(args: &[String]) -> Result<Self> {
        let mut options = Self::default();
        let mut runtimes = vec![false];
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
                "live" | "replay" | "idle" | "ack" | "llm" if first => options.workload(arg),
                "--n" => options.n = value(arg)?.parse()?,
                "--n-python" => options.n_python = value(arg)?.parse()?,
                "--k" => options.k = value(arg)?.parse()?,
                "--c" => options.c = value(arg)?.parse()?,
                "--c-deployed" => options.c_deployed = value(arg)?.parse()?,
                "--m" => options.m = value(arg)?.parse()?,
                "--reps" => options.reps = value(arg)?.parse()?,
                "--variants" => {
                    options.variants = value(arg)?
                        .split(',')
                        .map(Variant::parse)
                        .collect::<Result<_>>()?;
                }
                "--setup" => options.setups = setups(&value(arg)?)?,
                "--agent-runtime" => runtimes = agent_runtimes(&value(arg)?)?,
                "--ack-rate" => options.ack_rate = value(arg)?.parse()?,
                "--ack-secs" => options.ack_secs = value(arg)?.parse()?,
                "--rate" => options.rate = value(arg)?.parse()?,
                "--n-light" => options.n_light = value(arg)?.parse()?,
                "--n-lambda" => options.n_lambda = value(arg)?.parse()?,
                "--delay-ms" => options.delay_ms = value(arg)?.parse()?,
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
        options.asked = options.variants.clone();
        options.variants = expand(&options.variants, &runtimes);
        options.check()?;
        Ok(options)
    }

    fn workload(&mut self, name: &str) {
        self.live = name == "live";
        self.replay = name == "replay";
        self.idle = name == "idle";
        self.ack = name == "ack";
        self.llm = name == "llm";
    }

    fn check(&self) -> Result<()> {
        let sizes = [
            self.n,
            self.n_python,
            self.k,
            self.c,
            self.c_deployed,
            self.reps,
            self.n_light,
            self.n_lambda,
        ];
        if sizes.contains(&0) {
            bail!(
                "--n, --n-python, --k, --c, --c-deployed, --n-light, --n-lambda and --reps must be positive"
            );
        }
        if !(self.rate > 0.0 && self.delay_ms >= 0.0) {
            bail!("--rate must be positive and --delay-ms at least 0");
        }
        Ok(())
    }

    /// Executions in flight in `setup` (in the light setup, as many as the rate makes).
    pub(crate) fn c_of(&self, setup: Setup) -> usize {
        match setup {
            Setup::Pinned | Setup::Light | Setup::Remote => self.c,
            Setup::Deployed => self.c_deployed,
            Setup::Lambda => 1,
        }
    }

    /// The variants of `setup`'s columns: the light and remote loads run every variant asked
    /// for on both runtimes, the Lambda-like one on the current-thread runtime only.
    pub(crate) fn variants_of(&self, setup: Setup) -> Vec<Variant> {
        match setup {
            Setup::Pinned | Setup::Deployed => self.variants.clone(),
            Setup::Light | Setup::Remote => expand(&self.asked, &[false, true]),
            Setup::Lambda => expand(&self.asked, &[true]),
        }
    }

    /// Executions per live run of `variant` in `setup`.
    pub(crate) fn n_of(&self, setup: Setup, variant: Variant) -> usize {
        match setup {
            Setup::Light => self.n_light,
            Setup::Lambda => self.n_lambda,
            _ if variant == Variant::Python => self.n_python,
            _ => self.n,
        }
    }
}

fn setups(value: &str) -> Result<Vec<Setup>> {
    let mut setups = Vec::new();
    for name in value.split(',') {
        for setup in Setup::parse(name.trim())? {
            if !setups.contains(&setup) {
                setups.push(setup);
            }
        }
    }
    Ok(setups)
}

/// `false` is the multi-thread runtime, `true` the current-thread one.
fn agent_runtimes(value: &str) -> Result<Vec<bool>> {
    match value {
        "multi" => Ok(vec![false]),
        "current" => Ok(vec![true]),
        "both" => Ok(vec![false, true]),
        other => bail!("unknown agent runtime {other:?} (multi, current, both)"),
    }
}

/// Every variant on every runtime asked for (python once), in column order.
fn expand(variants: &[Variant], runtimes: &[bool]) -> Vec<Variant> {
    let mut all: Vec<Variant> = variants
        .iter()
        .flat_map(|v| runtimes.iter().map(|current| v.on_runtime(*current)))
        .collect();
    all.sort();
    all.dedup();
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Options {
        let args: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        Options::parse(&args).unwrap()
    }

    #[test]
    fn runtimes_expand_the_native_variants() {
        let both = parse("live --variants rust,python,floor --agent-runtime both");
        assert_eq!(
            both.variants,
            [
                Variant::Rust,
                Variant::RustCt,
                Variant::Python,
                Variant::Floor,
                Variant::FloorCt
            ]
        );
        let current = parse("live --variants floor,rust --agent-runtime current");
        assert_eq!(current.variants, [Variant::RustCt, Variant::FloorCt]);
        assert_eq!(parse("ack").setups, Setup::ALL);
        assert_eq!(
            parse("ack --setup both").setups,
            [Setup::Pinned, Setup::Deployed]
        );
        assert_eq!(parse("ack --setup deployed").setups, [Setup::Deployed]);
        let lambda = parse("live --variants rust,python --setup light,lambda");
        assert_eq!(lambda.setups, [Setup::Light, Setup::Lambda]);
        assert_eq!(
            lambda.variants_of(Setup::Light),
            [Variant::Rust, Variant::RustCt, Variant::Python]
        );
        assert_eq!(
            lambda.variants_of(Setup::Lambda),
            [Variant::RustCt, Variant::Python]
        );
    }
}
