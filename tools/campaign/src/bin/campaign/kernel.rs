//! The kernel under test: a `campaign-kernel` child process (a `DevKernel` with a data
//! directory) that the driver talks to over HTTP, and kills with `SIGKILL` and starts again on
//! the same ports and directory. Reads answer `None` (or empty) while it is down; the callers
//! poll.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rebuno::wire::{Approval, Event, Execution, StepRecord};
use rebuno_campaign::{AGENT_ID, KERNEL_READY};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Mutex;
use tokio::time::Instant;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a (re)start may take before it counts as failed.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The `campaign-kernel` process and how to reach it.
#[derive(Debug)]
pub(crate) struct KernelHandle {
    port: u16,
    admin_port: u16,
    binary: PathBuf,
    data_dir: PathBuf,
    log: PathBuf,
    webhook_url: String,
    child: Mutex<Option<Child>>,
    http: reqwest::Client,
    /// Executions created so far (their idempotency keys).
    created: AtomicU64,
}

/// One page of `GET /v0/executions`.
#[derive(Debug, Deserialize)]
struct ListPage {
    executions: Vec<Execution>,
    #[serde(default)]
    next_cursor: Option<String>,
}

impl KernelHandle {
    /// Starts `binary` on `ports` (the API's, the admin route's) with `workdir/kernel` as its data directory, the agent
    /// registered with `webhook_url`; its stderr goes to `workdir/kernel.log`.
    pub(crate) async fn start(
        binary: &Path,
        workdir: &Path,
        ports: (u16, u16),
        webhook_url: String,
    ) -> Result<Self, BoxError> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()?;
        let kernel = Self {
            port: ports.0,
            admin_port: ports.1,
            binary: binary.to_owned(),
            data_dir: workdir.join("kernel"),
            log: workdir.join("kernel.log"),
            webhook_url,
            child: Mutex::new(None),
            http,
            created: AtomicU64::new(0),
        };
        kernel.spawn().await?;
        Ok(kernel)
    }

    /// The kernel's address (the same across restarts).
    pub(crate) fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The kernel's base URL.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// Its stderr log (checked for panics).
    pub(crate) fn log_path(&self) -> &Path {
        &self.log
    }

    /// Spawns the process and waits for its ready line.
    async fn spawn(&self) -> Result<(), BoxError> {
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut child = Command::new(&self.binary)
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--admin-port")
            .arg(self.admin_port.to_string())
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--webhook-url")
            .arg(&self.webhook_url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(START_TIMEOUT, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.starts_with(KERNEL_READY) {
                    return true;
                }
            }
            false
        })
        .await;
        if ready != Ok(true) {
            let _ = child.start_kill();
            let _ = child.wait().await;
            return Err(format!(
                "campaign-kernel did not become ready (see {})",
                self.log.display()
            )
            .into());
        }
        *self.child.lock().await = Some(child);
        Ok(())
    }

    /// `SIGKILL`, then waits for the process to be gone.
    pub(crate) async fn kill(&self) {
        if let Some(mut child) = self.child.lock().await.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    /// Kills the kernel, waits `pause`, starts it again on the same ports and directory
    /// (retrying a failed start a few times).
    pub(crate) async fn restart(&self, pause: Duration) -> Result<(), BoxError> {
        self.kill().await;
        self.sabotage()?;
        tokio::time::sleep(pause).await;
        let mut tries = 0;
        loop {
            match self.spawn().await {
                Ok(()) => return Ok(()),
                Err(error) if tries < 5 => {
                    tries += 1;
                    eprintln!("kernel restart failed ({error}); again");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// `CAMPAIGN_SABOTAGE`, to show the restart invariants have teeth: `kernel-leases` deletes the
    /// kept leases (the kernel reclaims every running dispatch, as before it kept them);
    /// `kernel-events` drops the last line of the event log (a lost batch of events).
    fn sabotage(&self) -> std::io::Result<()> {
        match std::env::var("CAMPAIGN_SABOTAGE").as_deref() {
            Ok("kernel-leases") => {
                let _ = std::fs::remove_file(self.data_dir.join("leases.jsonl"));
            }
            Ok("kernel-events") => {
                let path = self.data_dir.join("events.jsonl");
                let text = std::fs::read_to_string(&path)?;
                let kept = text
                    .trim_end_matches('\n')
                    .rsplit_once('\n')
                    .map_or("", |(a, _)| a);
                let kept = if kept.is_empty() {
                    String::new()
                } else {
                    format!("{kept}\n")
                };
                std::fs::write(&path, kept)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Stops the kernel at the end (closing its stdin lets it shut down; the kill makes sure).
    pub(crate) async fn shutdown(&self) {
        self.kill().await;
    }

    /// `GET path` decoded as `T`; `None` when down, refused or not `2xx`.
    async fn get<T: DeserializeOwned>(&self, path: &str) -> Option<T> {
        let response = self
            .http
            .get(format!("{}{path}", self.url()))
            .send()
            .await
            .ok()?;
        if !response.status().is_success() {
            return None;
        }
        serde_json::from_slice(&response.bytes().await.ok()?).ok()
    }

    /// `POST url` with `body`; the status and the decoded body, `None` when unreachable.
    async fn post(&self, url: String, body: Value) -> Option<(u16, Value)> {
        let response = self
            .http
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .ok()?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.unwrap_or_default();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Some((status, body))
    }

    /// Creates an execution of the campaign agent. A create whose answer was lost (the kernel
    /// killed meanwhile) is retried under the same idempotency key, so it creates one.
    pub(crate) async fn create_execution(&self, input: Value) -> Result<String, BoxError> {
        let key = format!("campaign-{}", self.created.fetch_add(1, Ordering::Relaxed));
        let body = json!({"agent_id": AGENT_ID, "input": input, "idempotency_key": key});
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            let url = format!("{}/v0/executions", self.url());
            if let Some((status, answer)) = self.post(url, body.clone()).await {
                if (200..300).contains(&status) {
                    return match answer["id"].as_str() {
                        Some(id) if !id.is_empty() => Ok(id.to_owned()),
                        _ => {
                            Err(format!("create answered {status} without an id: {answer}").into())
                        }
                    };
                }
                if status < 500 {
                    return Err(format!("create answered {status}: {answer}").into());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err("the kernel did not take the execution in time".into())
    }

    /// An execution snapshot (`None` when unknown or the kernel is down).
    pub(crate) async fn execution(&self, id: &str) -> Option<Execution> {
        self.get(&format!("/v0/executions/{id}")).await
    }

    /// The steps of an execution (`None` when the kernel is down).
    pub(crate) async fn steps(&self, id: &str) -> Option<Vec<StepRecord>> {
        self.get(&format!("/v0/executions/{id}/steps")).await
    }

    /// The whole event log of an execution, page by page (`None` when the kernel is down).
    pub(crate) async fn events(&self, id: &str) -> Option<Vec<Event>> {
        let mut events: Vec<Event> = Vec::new();
        loop {
            let after = events.last().map_or(0, |e| e.event_seq);
            let page: Vec<Event> = self
                .get(&format!(
                    "/v0/executions/{id}/events?after_seq={after}&limit=1000"
                ))
                .await?;
            if page.is_empty() {
                return Some(events);
            }
            events.extend(page);
        }
    }

    /// Pending approvals (empty when the kernel is down).
    pub(crate) async fn approvals(&self) -> Vec<Approval> {
        self.get("/v0/approvals").await.unwrap_or_default()
    }

    /// Grants an approval: the kernel's status, `None` when it is down.
    pub(crate) async fn grant(&self, approval: &str) -> Option<u16> {
        let url = format!("{}/v0/approvals/{approval}/grant", self.url());
        self.post(url, json!({})).await.map(|(status, _)| status)
    }

    /// `DevKernel::redeliver` through the admin route: the new attempt, `None` when nothing was
    /// in flight or the kernel is down.
    pub(crate) async fn redeliver(&self, id: &str) -> Option<u32> {
        let url = format!("http://127.0.0.1:{}/redeliver/{id}", self.admin_port);
        let (status, body) = self.post(url, json!({})).await?;
        if status != 200 {
            return None;
        }
        body["attempt"].as_u64().and_then(|a| u32::try_from(a).ok())
    }

    /// Every execution of the campaign agent (subagents included), page by page; `None` when
    /// the kernel is down.
    pub(crate) async fn list_all(&self) -> Option<Vec<Execution>> {
        let mut all = Vec::new();
        let mut cursor = String::new();
        loop {
            let page: ListPage = self
                .get(&format!(
                    "/v0/executions?agent_id={AGENT_ID}&limit=200&cursor={cursor}"
                ))
                .await?;
            let empty = page.executions.is_empty();
            all.extend(page.executions);
            match page.next_cursor {
                Some(next) if !empty => cursor = next,
                _ => return Some(all),
            }
        }
    }

    /// Waits until the execution is terminal or `bound` has passed since `begun`; whether it
    /// ended. Polls, so a kernel restart in between is only a few failed reads.
    pub(crate) async fn wait_terminal(&self, id: &str, begun: Instant, bound: Duration) -> bool {
        while begun.elapsed() < bound {
            if self
                .execution(id)
                .await
                .is_some_and(|e| e.status.is_terminal())
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    }
}

/// Everything the checks read from the kernel, fetched once at the end: every execution of the
/// campaign agent with its steps and its event log.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    executions: std::collections::HashMap<String, (Execution, Vec<StepRecord>, Vec<Event>)>,
}

impl Snapshot {
    /// Reads every execution, its steps and its events (8 at a time); fails when the kernel
    /// does not answer.
    pub(crate) async fn take(kernel: &KernelHandle) -> Result<Self, BoxError> {
        use futures_util::StreamExt;
        let all = kernel.list_all().await.ok_or("the kernel did not list")?;
        let reads = futures_util::stream::iter(all)
            .map(|execution| async move {
                let steps = kernel.steps(&execution.id).await;
                let events = kernel.events(&execution.id).await;
                (execution, steps, events)
            })
            .buffer_unordered(8)
            .collect::<Vec<_>>()
            .await;
        let mut executions = std::collections::HashMap::new();
        for (execution, steps, events) in reads {
            let (Some(steps), Some(events)) = (steps, events) else {
                return Err(format!("the kernel did not answer for {}", execution.id).into());
            };
            executions.insert(execution.id.clone(), (execution, steps, events));
        }
        Ok(Self { executions })
    }

    /// An execution as it ended.
    pub(crate) fn execution(&self, id: &str) -> Option<Execution> {
        self.executions.get(id).map(|(e, _, _)| e.clone())
    }

    /// Its steps (empty if unknown).
    pub(crate) fn steps(&self, id: &str) -> Vec<StepRecord> {
        self.executions
            .get(id)
            .map(|(_, s, _)| s.clone())
            .unwrap_or_default()
    }

    /// Its event log (empty if unknown).
    pub(crate) fn events(&self, id: &str) -> Vec<Event> {
        self.executions
            .get(id)
            .map(|(_, _, e)| e.clone())
            .unwrap_or_default()
    }

    /// Child executions by parent id (through `spawned_by`).
    pub(crate) fn children(&self) -> std::collections::HashMap<String, Vec<String>> {
        let mut index: std::collections::HashMap<String, Vec<String>> = Default::default();
        for (execution, _, _) in self.executions.values() {
            if let Some(spawned_by) = &execution.spawned_by {
                index
                    .entry(spawned_by.execution_id.clone())
                    .or_default()
                    .push(execution.id.clone());
            }
        }
        index
    }
}
