//! One side of a differential run: a dev kernel (on a manual clock, so approval expiry and
//! rate-limit refills happen when the test says), an LLM stub, a scratch directory and the
//! agent processes of one language, with the operations a scenario drives them through.
//!
//! An agent process is a uvicorn child (Python) or a Tokio runtime of its own on its own thread
//! (Rust). Killing one is SIGKILL for Python and `Runtime::shutdown_background` for Rust: both
//! stop every in-flight handler at its current await without running another line of it, so the
//! kernel sees the same thing, a dispatch that simply goes quiet. A Rust binary per agent would
//! add a build and a link per group for no difference the kernel could observe.

use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use rebuno::wire::{Execution, ExecutionStatus};
use rebuno::{Agent, AgentBuilder};
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::Value;

use crate::kit::Kit;
use crate::llm_stub::LlmStub;
use crate::ports::free_port;
use crate::pyagent::{PyAgent, Ready, Uvicorn};
use crate::venv::{python, repo};

/// The agents' HMAC secret.
pub const SECRET: &str = "diff-secret";
/// Upper bound of every wait; a healthy scenario needs a second or two.
pub const WAIT: Duration = Duration::from_secs(30);

/// Which SDK a side runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    Python,
    Rust,
}

/// A scenario group: one agent, as a Python module of `py/` and as a Rust twin.
#[derive(Debug)]
pub struct Group {
    pub agent_id: &'static str,
    /// The module of `py/` whose `app` serves the agent.
    pub py_module: &'static str,
    pub policy: Option<&'static str>,
    /// Adds the twin's handler to a builder already given its id, secret and kernel URL.
    pub rust: fn(AgentBuilder, Kit) -> AgentBuilder,
}

/// A Rust agent "process": its own runtime on its own thread.
struct RustProc {
    runtime: Option<tokio::runtime::Runtime>,
}

impl RustProc {
    fn start(agent: Agent) -> (Self, std::net::SocketAddr) {
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("runtime");
            let addr = runtime.block_on(async {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await;
                let listener = listener.expect("bind");
                let addr = listener.local_addr().expect("addr");
                let server = rebuno_hyper::serve(listener, agent);
                tokio::spawn(std::future::IntoFuture::into_future(server));
                addr
            });
            let runtime = Some(runtime);
            (Self { runtime }, addr)
        })
        .join()
        .expect("agent thread")
    }

    fn kill(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for RustProc {
    fn drop(&mut self) {
        self.kill();
    }
}

enum Proc {
    Py(PyAgent),
    Rust(RustProc),
}

/// One language's world for one scenario.
pub struct Side {
    pub lang: Lang,
    pub kernel: DevKernel,
    pub dir: PathBuf,
    pub stub: LlmStub,
    group: &'static Group,
    procs: Vec<(String, Proc)>,
    watched: Vec<String>,
}

impl Side {
    /// A kernel, a stub and a scratch directory; then one agent process is served.
    pub async fn start(lang: Lang, group: &'static Group, scenario: &str) -> Self {
        let tag = match lang {
            Lang::Python => "py",
            Lang::Rust => "rs",
        };
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("differential")
            .join(format!("{scenario}-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("scratch dir");
        let kernel = DevKernel::builder().manual_clock().start().await;
        let mut side = Self {
            lang,
            kernel: kernel.expect("dev kernel"),
            dir,
            stub: LlmStub::start().await,
            group,
            procs: Vec::new(),
            watched: Vec::new(),
        };
        side.serve().await;
        side
    }

    /// Serves a new agent process and points the agent id at it; returns its label.
    pub async fn serve(&mut self) -> String {
        let label = format!("{:?}-{}", self.lang, self.procs.len()).to_lowercase();
        let (proc, webhook) = match self.lang {
            Lang::Python => self.spawn_python(&label).await,
            Lang::Rust => self.spawn_rust(&label),
        };
        let mut spec = AgentSpec::new(self.group.agent_id, webhook, SECRET);
        if let Some(yaml) = self.group.policy {
            spec = spec.policy_yaml(yaml);
        }
        self.kernel.register_agent(spec).expect("register agent");
        self.procs.push((label.clone(), proc));
        label
    }

    fn spawn_rust(&self, label: &str) -> (Proc, String) {
        let kit = Kit {
            dir: self.dir.clone(),
            label: label.to_owned(),
            llm_url: self.stub.chat_url(),
        };
        let builder = Agent::builder(self.group.agent_id)
            .secret(SECRET)
            .base_url(self.kernel.url());
        let agent = (self.group.rust)(builder, kit).build().expect("rust twin");
        let (proc, addr) = RustProc::start(agent);
        (Proc::Rust(proc), format!("http://{addr}/webhook"))
    }

    async fn spawn_python(&self, label: &str) -> (Proc, String) {
        for _ in 0..3 {
            let port = free_port();
            let mut agent = self.uvicorn(label, port);
            match agent.wait_ready(WAIT).await {
                Ready::Yes => {
                    return (Proc::Py(agent), format!("http://127.0.0.1:{port}/webhook"));
                }
                Ready::PortTaken => continue,
                other => panic!("python agent {label}: {other:?}\n{}", agent.tail(60)),
            }
        }
        panic!("no free port for {label} after 3 tries");
    }

    fn uvicorn(&self, label: &str, port: u16) -> PyAgent {
        let python = python();
        let app_dir = repo().join("tests/differential/py");
        let log = self.dir.join(format!("{label}.log"));
        let how = Uvicorn {
            python: &python,
            app_dir: &app_dir,
            module: self.group.py_module,
            label,
            port,
            log: &log,
        };
        let url = self.kernel.url();
        let llm = self.stub.chat_url();
        let env = [
            ("REBUNO_URL", url.as_ref()),
            ("REBUNO_AGENT_SECRET", SECRET.as_ref()),
            ("DIFF_DIR", self.dir.as_os_str()),
            ("DIFF_LABEL", label.as_ref()),
            ("DIFF_LLM_URL", llm.as_ref()),
        ];
        PyAgent::spawn(how, env)
    }

    /// The label of the `index`th agent process served.
    pub fn label(&self, index: usize) -> String {
        self.procs[index].0.clone()
    }

    /// Kills agent process `label` (SIGKILL, or its runtime dropped mid-await).
    pub fn kill(&mut self, label: &str) {
        for (name, proc) in &mut self.procs {
            if name == label {
                match proc {
                    Proc::Py(agent) => agent.kill(),
                    Proc::Rust(agent) => agent.kill(),
                }
            }
        }
    }

    /// Creates an execution of the group's agent.
    pub async fn create(&mut self, input: Value) -> String {
        let new = NewExecution::new(self.group.agent_id, input);
        let created = self.kernel.create_execution(new).await;
        let id = created.expect("create execution").id;
        self.watched.push(id.clone());
        id
    }

    /// Creates an execution and waits for it to end.
    pub async fn run(&mut self, input: Value) -> String {
        let id = self.create(input).await;
        self.wait_terminal(&id).await;
        id
    }

    /// Remembers an execution made elsewhere (a subagent, a fork) for the diagnostics.
    pub fn watch(&mut self, id: &str) {
        if !self.watched.iter().any(|known| known == id) {
            self.watched.push(id.to_owned());
        }
    }

    pub async fn wait_terminal(&self, id: &str) -> Execution {
        self.wait_status(id, ExecutionStatus::is_terminal).await
    }

    pub async fn wait_status(&self, id: &str, done: impl Fn(ExecutionStatus) -> bool) -> Execution {
        match self.kernel.wait_until(id, WAIT, done).await {
            Ok(execution) => execution,
            Err(e) => panic!("{:?} side: {e}", self.lang),
        }
    }

    /// Waits until the log of `id` holds an event of `kind`; returns its seq.
    pub async fn wait_event(&self, id: &str, kind: &str) -> u64 {
        for _ in 0..(WAIT.as_millis() / 10) {
            let events = self.kernel.events(id);
            if let Some(event) = events.iter().find(|e| e.kind == kind) {
                return event.event_seq;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{:?} side: no {kind} for {id}", self.lang);
    }

    /// Lines of the marker file `name`, empty if never written.
    pub fn marks(&self, name: &str) -> Vec<String> {
        let text = fs::read_to_string(self.dir.join(name)).unwrap_or_default();
        text.lines().map(str::to_owned).collect()
    }

    /// Waits until the marker file `name` has `count` lines.
    pub async fn wait_marks(&self, name: &str, count: usize) -> Vec<String> {
        for _ in 0..(WAIT.as_millis() / 20) {
            let marks = self.marks(name);
            if marks.len() >= count {
                return marks;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{:?} side: marker {name} never reached {count}", self.lang);
    }

    /// Every marker line, `mark <file> <process index> <text>`, files in name order: which
    /// bodies ran, how often and in which agent process.
    pub fn mark_lines(&self) -> Vec<String> {
        let mut files: Vec<String> = fs::read_dir(&self.dir)
            .expect("scratch dir")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| !n.ends_with(".log") && !n.starts_with("release."))
            .filter(|n| self.dir.join(n).is_file())
            .collect();
        files.sort();
        let prefix = format!("{:?}-", self.lang).to_lowercase();
        let mut lines = Vec::new();
        for name in files {
            for mark in self.marks(&name) {
                let mark = mark.strip_prefix(&prefix).unwrap_or(&mark);
                lines.push(format!("mark {name} {mark}"));
            }
        }
        lines
    }

    /// Lets a body waiting in `released(name)` go on.
    pub fn release(&self, name: &str) {
        fs::write(self.dir.join(format!("release.{name}")), "").expect("release file");
    }

    /// Advances the kernel's manual clock (approval expiry, rate-limit refill).
    pub fn advance(&self, by: Duration) {
        self.kernel.advance(by).expect("manual clock");
    }

    fn diagnostics(&self) -> String {
        let mut out = String::new();
        for (label, proc) in &self.procs {
            if let Proc::Py(agent) = proc {
                let _ = writeln!(out, "----- {label} log tail -----\n{}", agent.tail(60));
            }
        }
        for id in &self.watched {
            let _ = writeln!(out, "----- {:?} events of {id} -----", self.lang);
            for e in self.kernel.events(id) {
                let _ = writeln!(out, "{:>3} {:<24} {}", e.event_seq, e.kind, e.payload);
            }
        }
        out
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.diagnostics());
            eprintln!("scratch directory kept: {}", self.dir.display());
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}
