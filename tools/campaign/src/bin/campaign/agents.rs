//! The agent processes: spawned from the `campaign-agent` binary next to the driver, killed with
//! SIGKILL and restarted on the same ports.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::sync::{Mutex, RwLock};

/// One agent slot: a port pair and the process currently serving it.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) index: usize,
    pub(crate) port: u16,
    pub(crate) deadline_port: u16,
    /// The kernel URL the agent uses (its proxy).
    kernel_url: String,
    binary: PathBuf,
    effects: PathBuf,
    stderr: PathBuf,
    /// Generation of the process: bumped (under the write lock) before each kill. Deliveries
    /// hold the read lock while they send, so a repeat of an attempt never reaches a successor.
    pub(crate) generation: RwLock<u64>,
    child: Mutex<Option<Child>>,
    pub(crate) alive: AtomicBool,
    pub(crate) pids: std::sync::Mutex<Vec<u32>>,
}

/// `n` distinct free loopback ports below the ephemeral range (bound at once, then released),
/// so no outgoing connection takes one while its agent is down for a restart.
pub(crate) fn free_ports(n: usize) -> std::io::Result<Vec<u16>> {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| {
            r.split_whitespace()
                .next()
                .and_then(|p| p.parse::<u16>().ok())
        })
        .unwrap_or(32768);
    let (low, high) = (
        ephemeral_low.saturating_sub(12_000).max(1024),
        ephemeral_low - 1,
    );
    let mut rng = rebuno_campaign::Rng::new(
        u64::from(std::process::id())
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
    );
    let mut listeners = Vec::new();
    let mut tries = 0;
    while listeners.len() < n && tries < 1000 {
        tries += 1;
        let port = rng.range(u64::from(low), u64::from(high)) as u16;
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            listeners.push(listener);
        }
    }
    if listeners.len() < n {
        // Fall back to ephemeral ports.
        while listeners.len() < n {
            listeners.push(std::net::TcpListener::bind("127.0.0.1:0")?);
        }
    }
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}

/// The campaign's binaries next to the running driver: `campaign-agent` and `campaign-kernel`.
#[derive(Debug, Clone)]
pub(crate) struct Binaries {
    pub(crate) agent: PathBuf,
    pub(crate) kernel: PathBuf,
}

/// Finds the binaries next to the driver. Under `cargo run` (which builds only the driver)
/// they are built first with the same cargo and profile, so they are never missing or stale.
pub(crate) fn binaries() -> std::io::Result<Binaries> {
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .ok_or_else(|| std::io::Error::other("the driver has no directory"))?;
    let path = |name: &str| dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    if let Some(cargo) = std::env::var_os("CARGO") {
        let mut build = std::process::Command::new(cargo);
        build.args(["build", "-q", "-p", "rebuno-campaign"]);
        build.args(["--bin", "campaign-agent", "--bin", "campaign-kernel"]);
        if dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let status = build.status()?;
        if !status.success() {
            return Err(std::io::Error::other(format!(
                "building campaign-agent and campaign-kernel failed ({status})"
            )));
        }
    }
    let binaries = Binaries {
        agent: path("campaign-agent"),
        kernel: path("campaign-kernel"),
    };
    for path in [&binaries.agent, &binaries.kernel] {
        if !path.exists() {
            return Err(std::io::Error::other(format!(
                "{} not found: run `cargo build -p rebuno-campaign --bins` first",
                path.display()
            )));
        }
    }
    Ok(binaries)
}

impl Slot {
    pub(crate) fn new(
        index: usize,
        ports: (u16, u16),
        kernel_url: String,
        binary: &Path,
        workdir: &Path,
    ) -> std::io::Result<Arc<Self>> {
        Ok(Arc::new(Self {
            index,
            port: ports.0,
            deadline_port: ports.1,
            kernel_url,
            binary: binary.to_owned(),
            effects: workdir.join("effects.jsonl"),
            stderr: workdir.join(format!("agent-{index}.log")),
            generation: RwLock::new(0),
            child: Mutex::new(None),
            alive: AtomicBool::new(false),
            pids: std::sync::Mutex::new(Vec::new()),
        }))
    }

    pub(crate) fn stderr_path(&self) -> &Path {
        &self.stderr
    }

    /// Spawns the process and waits until it answers `/healthz`.
    pub(crate) async fn spawn(&self) -> std::io::Result<()> {
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.stderr)?;
        let child = Command::new(&self.binary)
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--deadline-port")
            .arg(self.deadline_port.to_string())
            .arg("--effects")
            .arg(&self.effects)
            .env("REBUNO_URL", &self.kernel_url)
            .env("REBUNO_AGENT_SECRET", rebuno_campaign::SECRET)
            .env_remove("REBUNO_API_KEY")
            .env(
                "CAMPAIGN_SABOTAGE",
                std::env::var("CAMPAIGN_SABOTAGE").unwrap_or_default(),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true)
            .spawn()?;
        if let Some(pid) = child.id()
            && let Ok(mut pids) = self.pids.lock()
        {
            pids.push(pid);
        }
        *self.child.lock().await = Some(child);
        let url = format!("http://127.0.0.1:{}/healthz", self.port);
        let client = reqwest::Client::new();
        for _ in 0..200 {
            if let Ok(response) = client
                .get(&url)
                .timeout(Duration::from_millis(500))
                .send()
                .await
                && response.status().is_success()
            {
                self.alive.store(true, Ordering::SeqCst);
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(std::io::Error::other(format!(
            "agent {} did not become healthy",
            self.index
        )))
    }

    /// SIGKILL, then wait for the process to be gone.
    pub(crate) async fn kill(&self) {
        let mut generation = self.generation.write().await;
        self.alive.store(false, Ordering::SeqCst);
        if let Some(mut child) = self.child.lock().await.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
        *generation += 1;
    }
}
