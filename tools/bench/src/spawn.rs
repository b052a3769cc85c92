//! Starting the kernel and agent processes, and talking to them: the kernel's control channel
//! ([`crate::control`]) and the native agents' `stats` line on stdin.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{Mutex, mpsc};

use crate::control::{Reply, Request, RunReport, WaitReport};
use crate::options::{Options, Variant};
use crate::proc::{ContextSwitches, context_switches, cpu_seconds};

/// The shared secret of the benchmark agent.
pub(crate) const SECRET: &str = "bench-secret";

/// An agent process's allocation counters (`{"allocs":N,"bytes":B}`).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub(crate) struct AllocCounts {
    pub(crate) allocs: u64,
    pub(crate) bytes: u64,
}

/// The stdin and stdout of a native agent, for its `stats` requests.
struct Probe {
    stdin: Mutex<ChildStdin>,
    lines: Mutex<mpsc::UnboundedReceiver<String>>,
}

/// A child process, killed when dropped.
pub(crate) struct Proc {
    child: Child,
    label: String,
    probe: Option<Probe>,
}

impl Proc {
    pub(crate) fn pid(&self) -> Result<u32> {
        self.child
            .id()
            .ok_or_else(|| anyhow!("{} already exited", self.label))
    }

    pub(crate) fn cpu(&self) -> Result<f64> {
        cpu_seconds(self.pid()?)
    }

    pub(crate) fn context_switches(&self) -> Result<ContextSwitches> {
        context_switches(self.pid()?)
    }

    /// The agent's allocation counters (a `stats` line on its stdin, one JSON line back);
    /// `None` for an agent that is not this binary.
    pub(crate) async fn allocs(&self) -> Result<Option<AllocCounts>> {
        let Some(probe) = &self.probe else {
            return Ok(None);
        };
        let mut stdin = probe.stdin.lock().await;
        stdin.write_all(b"stats\n").await?;
        stdin.flush().await?;
        let mut lines = probe.lines.lock().await;
        loop {
            let line = tokio::time::timeout(Duration::from_secs(10), lines.recv())
                .await
                .with_context(|| format!("{} did not answer stats", self.label))?
                .ok_or_else(|| anyhow!("{} closed its stdout", self.label))?;
            // Anything else it prints is skipped.
            if let Ok(counts) = serde_json::from_str::<AllocCounts>(&line) {
                return Ok(Some(counts));
            }
        }
    }

    /// Closes its stdin (the agents exit on that, so a `perf record` prefix can write its
    /// data), waits up to 10 s, then kills it.
    pub(crate) async fn stop(mut self) {
        drop(self.probe.take());
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
pub(crate) struct KernelProc {
    pub(crate) proc: Proc,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    pub(crate) url: String,
}

impl KernelProc {
    pub(crate) async fn request(&mut self, request: &Request) -> Result<Reply> {
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

    /// A proxy in the kernel process to `upstream` that delays every answer by `delay_ms`:
    /// its URL.
    pub(crate) async fn proxy(&mut self, upstream: &str, delay_ms: f64) -> Result<String> {
        let request = Request::Proxy {
            upstream: upstream.to_owned(),
            delay_ms,
        };
        match self.request(&request).await? {
            Reply::Ready(url) => Ok(url),
            other => bail!("unexpected reply {other:?}"),
        }
    }

    pub(crate) async fn run(&mut self, request: &Request) -> Result<RunReport> {
        match self.request(request).await? {
            Reply::Run(report) => {
                check_failures(&report)?;
                Ok(report)
            }
            other => bail!("unexpected reply {other:?}"),
        }
    }

    pub(crate) async fn wait(&mut self, request: &Request) -> Result<WaitReport> {
        match self.request(request).await? {
            Reply::Wait(report) => Ok(report),
            other => bail!("unexpected reply {other:?}"),
        }
    }

    /// The input of a `k`-step execution in `mode`, as the kernel process would create it.
    pub(crate) async fn input(&mut self, k: usize, mode: &str) -> Result<serde_json::Value> {
        let mode = mode.to_owned();
        match self.request(&Request::Input { k, mode }).await? {
            Reply::Input(input) => Ok(input),
            other => bail!("unexpected reply {other:?}"),
        }
    }

    /// Requests the stub provider has answered so far.
    pub(crate) async fn provider_calls(&mut self) -> Result<usize> {
        match self.request(&Request::ProviderCalls).await? {
            Reply::Count(calls) => Ok(calls),
            other => bail!("unexpected reply {other:?}"),
        }
    }

    pub(crate) async fn quit(mut self) {
        let _ = self.request(&Request::Quit).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.proc.child.wait()).await;
    }
}

/// Fails on a run whose executions did not all complete.
pub(crate) fn check_failures(report: &RunReport) -> Result<()> {
    if report.failed > 0 {
        bail!(
            "{} executions failed, e.g. {}",
            report.failed,
            report.first_failure.clone().unwrap_or_default()
        );
    }
    Ok(())
}

/// Starts processes, pinned (`taskset -c`) or not.
#[derive(Debug, Clone)]
pub(crate) struct Spawner {
    /// Pin the kernel to CPU 0 and the agent to CPU 1.
    pub(crate) pin: bool,
    /// Words before the agent's command.
    pub(crate) prefix: Vec<String>,
    /// The Python interpreter of the python variant.
    pub(crate) python: Option<PathBuf>,
}

impl Spawner {
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

    /// The kernel process, listening.
    pub(crate) async fn kernel(&self) -> Result<KernelProc> {
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
        let proc = Proc {
            child,
            label: "kernel".to_owned(),
            probe: None,
        };
        Ok(KernelProc {
            proc,
            stdin,
            lines,
            url,
        })
    }

    /// Starts `variant`'s agent against `kernel_url`; returns it and its webhook URL.
    pub(crate) async fn agent(&self, variant: Variant, kernel_url: &str) -> Result<(Proc, String)> {
        if variant.is_native() {
            self.native(variant, kernel_url).await
        } else {
            self.python(kernel_url).await
        }
    }

    /// This binary in the `agent` or `floor` role, on the variant's Tokio runtime.
    async fn native(&self, variant: Variant, kernel_url: &str) -> Result<(Proc, String)> {
        let exe = std::env::current_exe()?;
        let role = if variant.is_rust() { "agent" } else { "floor" };
        let mut child = self
            .command("1", &self.prefix, &exe)
            .args([role, kernel_url, SECRET, variant.runtime_arg()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting the agent process")?;
        let stdout = child.stdout.take().context("agent stdout")?;
        let stdin = child.stdin.take().context("agent stdin")?;
        let mut lines = BufReader::new(stdout).lines();
        let url = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .context("agent start timed out")??
            .ok_or_else(|| anyhow!("the agent process exited at start"))?;
        // Keep reading everything else it prints, for `allocs`.
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = tx.send(line);
            }
        });
        let probe = Probe {
            stdin: Mutex::new(stdin),
            lines: Mutex::new(rx),
        };
        let label = variant.name().to_owned();
        let probe = Some(probe);
        Ok((
            Proc {
                child,
                label,
                probe,
            },
            url,
        ))
    }

    /// `tools/bench/agent.py` under uvicorn.
    async fn python(&self, kernel_url: &str) -> Result<(Proc, String)> {
        let python = self.python.as_ref().context("no python")?;
        let port = free_port()?;
        let log = std::env::temp_dir().join(format!("rebuno-bench-python-{port}.log"));
        let out = std::fs::File::create(&log)?;
        let child = self
            .command("1", &self.prefix, python)
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
        let proc = Proc {
            child,
            label,
            probe: None,
        };
        Ok((proc, format!("http://127.0.0.1:{port}/webhook")))
    }
}

fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

pub(crate) fn which(program: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Sets the CPU affinity of every thread of this process (`taskset -a -p -c CPUS`).
pub(crate) fn pin_self(cpus: &str) -> Result<()> {
    let status = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &std::process::id().to_string()])
        .stdout(Stdio::null())
        .status()?;
    if !status.success() {
        bail!("taskset could not set the driver's CPUs to {cpus}");
    }
    Ok(())
}

/// This process's CPU affinity list as `taskset -c` takes it (e.g. `0,1` or `0-3`).
pub(crate) fn own_cpus() -> Result<String> {
    let out = std::process::Command::new("taskset")
        .args(["-c", "-p", &std::process::id().to_string()])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.rsplit_once(':')
        .map(|(_, list)| list.trim().to_owned())
        .filter(|list| out.status.success() && !list.is_empty())
        .ok_or_else(|| anyhow!("taskset printed no affinity list: {text}"))
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Python interpreter: `--python`, `REBUNO_BENCH_PYTHON`, or a venv made by
/// `scripts/interop-venv.sh` in `target/bench-venv`.
pub(crate) fn python(options: &Options) -> Result<PathBuf> {
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
