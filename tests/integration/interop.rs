//! Interop suite: agents written with the **official Python SDK** (`rebuno==0.29.2` from PyPI,
//! unchanged) run against the Rust dev kernel (`rebuno-devkernel`), and every test asserts on
//! the kernel's event log and steps, not only on outputs.
//!
//! What it proves: the dev kernel speaks the protocol the Python SDK speaks, end to end: signed
//! webhooks (`sha256=`), `v1=` signed agent requests with dispatch leases, agent metadata,
//! step submit / complete / fail and the replay short-circuit, `at_most_once` orphans coming
//! back `indeterminate` after a crash and re-delivery, `require_approval` with a grant through
//! `rebuno::client::Client`, policy denials surfacing as the SDK's refusal string, subagents in a
//! session with `previous()` state, and resources checkpointed by a Python driver and restored
//! in a fork made through `rebuno::client::Client::fork`; and that a history a Python agent
//! recorded replays offline against a Rust twin of its handler (`rebuno_devkernel::replay`):
//! both SDKs submit the same kind, target and args, so the kernel gives their steps one identity.
//!
//! Event orders are asserted exactly, except `dispatch.acked`: the kernel appends it when the
//! webhook returns, which can race the handler's first calls (PROTOCOL.md §1.12), so acks are
//! checked by dispatch id and attempt instead of position.
//!
//! Each test starts a [`DevKernel`] in-process, serves the agent modules of `tests/integration/interop/`
//! with uvicorn on free loopback ports (child processes, killed when the test ends, also on
//! failure), registers them, creates executions and inspects the log. On a failure the agents'
//! logs (uvicorn + SDK, captured under the test's scratch directory) and the event logs are
//! printed.
//!
//! Running it: `cargo test -p rebuno --test integration interop::`. The Python venv comes from
//! `scripts/interop-venv.sh` (default `target/interop-venv`; `REBUNO_INTEROP_VENV=DIR` picks
//! another, `PYTHON=...` the interpreter that creates it); a test creates it on first use when it
//! is missing (about 20 s, needs PyPI), so CI runs the script first. Without Python 3.11+ the
//! tests fail with the script's message rather than passing silently. `REBUNO_INTEROP_VERBOSE=1`
//! prints the agents' logs and the event logs of passing tests too (with `--nocapture`).

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use rebuno::wire::ApprovalStatus;
use rebuno::wire::{Execution, ExecutionStatus, StepRecord};
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// The agents' HMAC secret (the SDK reads it from `REBUNO_AGENT_SECRET`).
const SECRET: &str = "interop-secret";
/// Upper bound of every wait; a healthy run needs a few seconds.
const WAIT: Duration = Duration::from_secs(30);
/// What the kernel writes for an orphaned `at_most_once` step (PROTOCOL.md §1.5).
const INDETERMINATE: &str =
    "outcome unknown: this may already have taken effect. Check the state before continuing.";

// ---------------------------------------------------------------------------------------------
// Python venv and agent processes
// ---------------------------------------------------------------------------------------------

use crate::support::ports::free_port;
use crate::support::pyagent::{PyAgent, Ready, Uvicorn};
use crate::support::venv::{python, repo};

/// One test's world: a dev kernel, its Python agents and a scratch directory.
struct Interop {
    kernel: DevKernel,
    dir: PathBuf,
    agents: Vec<PyAgent>,
    watched: Vec<String>,
    /// A Rust agent served next to the Python ones (the cross-SDK LLM test).
    rust_agent: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl Interop {
    async fn start(test: &str) -> Self {
        let python = python();
        assert!(python.is_file());
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("interop")
            .join(format!("{test}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("scratch dir");
        let kernel = DevKernel::start().await.expect("dev kernel");
        Self {
            kernel,
            dir,
            agents: Vec::new(),
            watched: Vec::new(),
            rust_agent: None,
        }
    }

    /// Registers `agent_id` at a free port, then serves `module:app` there and waits until it
    /// accepts connections. Returns the agent's index (for [`Self::kill`]).
    async fn serve(&mut self, module: &str, agent_id: &str, policy: Option<&str>) -> usize {
        for _ in 0..3 {
            let port = free_port();
            let mut spec =
                AgentSpec::new(agent_id, format!("http://127.0.0.1:{port}/webhook"), SECRET);
            if let Some(yaml) = policy {
                spec = spec.policy_yaml(yaml);
            }
            self.kernel.register_agent(spec).expect("register agent");
            let label = format!("{agent_id}-{}", self.agents.len());
            let mut agent = self.spawn(module, &label, port);
            match agent.wait_ready(WAIT).await {
                Ready::Yes => {
                    self.agents.push(agent);
                    return self.agents.len() - 1;
                }
                // Someone took the port between our probe and uvicorn's bind: pick another.
                Ready::PortTaken => continue,
                Ready::Exited(status) => panic!(
                    "python agent {label} ({module}) exited before serving: {status}\n{}",
                    agent.tail(60)
                ),
                Ready::TimedOut => panic!(
                    "python agent {label} ({module}) not listening on port {port} after {WAIT:?}\n{}",
                    agent.tail(60)
                ),
            }
        }
        panic!("no free port for {agent_id} after 3 tries");
    }

    fn spawn(&self, module: &str, label: &str, port: u16) -> PyAgent {
        let log = self.dir.join(format!("{label}.log"));
        let python = python();
        let app_dir = repo().join("tests/integration/interop");
        let how = Uvicorn {
            python: &python,
            app_dir: &app_dir,
            module,
            label,
            port,
            log: &log,
        };
        let url = self.kernel.url();
        let env = [
            ("REBUNO_URL", url.as_ref()),
            ("REBUNO_AGENT_SECRET", SECRET.as_ref()),
            ("INTEROP_DIR", self.dir.as_os_str()),
        ];
        PyAgent::spawn(how, env)
    }

    /// SIGKILLs agent `index` (a crash: no shutdown hooks run).
    fn kill(&mut self, index: usize) {
        self.agents[index].kill();
    }

    async fn create(&mut self, agent_id: &str, input: Value) -> String {
        let created = self
            .kernel
            .create_execution(NewExecution::new(agent_id, input))
            .await
            .expect("create execution");
        self.watched.push(created.id.clone());
        created.id
    }

    fn watch(&mut self, id: &str) {
        if !self.watched.iter().any(|known| known == id) {
            self.watched.push(id.to_owned());
        }
    }

    async fn wait_terminal(&self, id: &str) -> Execution {
        self.wait_status(id, ExecutionStatus::is_terminal).await
    }

    async fn wait_status(&self, id: &str, done: impl Fn(ExecutionStatus) -> bool) -> Execution {
        match self.kernel.wait_until(id, WAIT, done).await {
            Ok(execution) => execution,
            Err(e) => panic!(
                "{e} (status now {:?}; agent logs and events follow)",
                self.kernel.execution(id).map(|x| x.status)
            ),
        }
    }

    /// Lines of the marker file `name` (`<pid> <text>` each), empty if never written.
    fn marks(&self, name: &str) -> Vec<String> {
        fs::read_to_string(self.dir.join(name))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    async fn wait_mark(&self, name: &str) -> Vec<String> {
        for _ in 0..(WAIT.as_millis() / 25) {
            let marks = self.marks(name);
            if !marks.is_empty() {
                return marks;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("marker {name} never written (agent logs and events follow)");
    }

    fn client(&self) -> rebuno::client::Client {
        rebuno::client::Client::builder()
            .base_url(self.kernel.url())
            .api_key("")
            .build()
            .expect("client")
    }

    fn diagnostics(&self) -> String {
        let mut out = String::new();
        for agent in &self.agents {
            let _ = writeln!(
                out,
                "----- python agent {} (port {}) log tail -----\n{}",
                agent.label,
                agent.port,
                agent.tail(80)
            );
        }
        for id in &self.watched {
            let _ = writeln!(out, "----- events of {id} -----");
            for e in self.kernel.events(id) {
                let _ = writeln!(out, "{:>3} {:<24} {}", e.event_seq, e.kind, e.payload);
            }
        }
        out
    }
}

impl Drop for Interop {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.diagnostics());
            eprintln!("scratch directory kept: {}", self.dir.display());
        } else if std::env::var_os("REBUNO_INTEROP_VERBOSE").is_some() {
            eprintln!("{}", self.diagnostics());
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Event-log helpers
// ---------------------------------------------------------------------------------------------

/// The parts of an event the assertions use, from either the harness or `rebuno::client::Client`.
#[derive(Debug, Clone)]
struct Ev {
    seq: u64,
    kind: String,
    payload: Value,
}

fn from_kernel(events: Vec<rebuno::wire::Event>) -> Vec<Ev> {
    events
        .into_iter()
        .map(|e| Ev {
            seq: e.event_seq,
            kind: e.kind,
            payload: e.payload,
        })
        .collect()
}

fn from_client(events: Vec<rebuno::wire::Event>) -> Vec<Ev> {
    events
        .into_iter()
        .map(|e| Ev {
            seq: e.event_seq,
            kind: e.kind,
            payload: e.payload,
        })
        .collect()
}

/// Event types in order, leaving out `dispatch.acked`: the kernel appends it when the webhook
/// returns, which may race with the handler's first calls (PROTOCOL.md §1.12). Acks are checked
/// separately with [`acks`].
fn kinds_without_acks(events: &[Ev]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e.kind.as_str())
        .filter(|k| *k != "dispatch.acked")
        .collect()
}

/// `(dispatch_id, attempt)` of every `dispatch.acked`, checking the payload shape.
fn acks(events: &[Ev]) -> Vec<(String, u64)> {
    events
        .iter()
        .filter(|e| e.kind == "dispatch.acked")
        .map(|e| {
            assert_eq!(e.payload["status"], "acked", "{e:?}");
            (
                e.payload["dispatch_id"]
                    .as_str()
                    .expect("dispatch_id")
                    .to_owned(),
                e.payload["attempt"].as_u64().expect("attempt"),
            )
        })
        .collect()
}

/// Dispatch ids of every `dispatch.queued`, checking the payload shape.
fn queued(events: &[Ev], execution: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.kind == "dispatch.queued")
        .map(|e| {
            assert_eq!(e.payload["status"], "pending", "{e:?}");
            assert_eq!(e.payload["attempt"], 0, "{e:?}");
            assert_eq!(e.payload["execution_id"], execution, "{e:?}");
            e.payload["dispatch_id"]
                .as_str()
                .expect("dispatch_id")
                .to_owned()
        })
        .collect()
}

/// The only event of type `kind`.
fn only<'a>(events: &'a [Ev], kind: &str) -> &'a Ev {
    let found: Vec<&Ev> = events.iter().filter(|e| e.kind == kind).collect();
    assert_eq!(found.len(), 1, "expected one {kind}: {found:?}");
    found[0]
}

/// Event types of one step, in order, checking that each names the step's kind and target.
fn step_history<'a>(events: &'a [Ev], step: &StepRecord) -> Vec<&'a str> {
    events
        .iter()
        .filter(|e| e.kind.starts_with("step.") && e.payload["step_id"] == step.step_id.as_str())
        .map(|e| {
            assert_eq!(e.payload["step_type"], step.kind.as_str(), "{e:?}");
            assert_eq!(e.payload["target"], step.target.as_str(), "{e:?}");
            e.kind.as_str()
        })
        .collect()
}

/// The payload of the step's only event of type `kind`.
fn step_event<'a>(events: &'a [Ev], step: &StepRecord, kind: &str) -> &'a Value {
    let found: Vec<&Ev> = events
        .iter()
        .filter(|e| e.kind == kind && e.payload["step_id"] == step.step_id.as_str())
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected one {kind} of {}: {found:?}",
        step.target
    );
    &found[0].payload
}

/// The steps with `target`, in step-id order.
fn steps_named<'a>(steps: &'a [StepRecord], target: &str) -> Vec<&'a StepRecord> {
    steps.iter().filter(|s| s.target == target).collect()
}

/// The only step with `target`.
fn step_named<'a>(steps: &'a [StepRecord], target: &str) -> &'a StepRecord {
    let found = steps_named(steps, target);
    assert_eq!(found.len(), 1, "expected one step {target}: {steps:#?}");
    found[0]
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .fold(String::new(), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        })
}

const STEP_RUN: [&str; 4] = [
    "step.proposed",
    "step.allowed",
    "step.executing",
    "step.succeeded",
];

// ---------------------------------------------------------------------------------------------
// a. tools and steps
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_tools_and_a_local_step_complete_with_the_full_event_log() {
    let mut h = Interop::start("tools").await;
    h.serve("tools_agent", "interop-tools", None).await;

    let id = h.create("interop-tools", json!({"query": "rust"})).await;
    let done = h.wait_terminal(&id).await;

    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    let found = json!(["rust-1", "rust-2", "rust-3"]);
    assert_eq!(
        done.output,
        Some(json!({"found": found, "picked": 2, "summary": "rust-1 | rust-2"}))
    );

    let events = from_kernel(h.kernel.events(&id));
    let mut expected = vec!["execution.created", "execution.started", "dispatch.queued"];
    for _ in 0..3 {
        expected.extend(STEP_RUN);
    }
    expected.push("execution.completed");
    assert_eq!(kinds_without_acks(&events), expected);
    let exec = id.to_string();
    let dispatches = queued(&events, &exec);
    assert_eq!(acks(&events), vec![(dispatches[0].clone(), 1)]);
    let ack = only(&events, "dispatch.acked");
    assert!(ack.seq > only(&events, "dispatch.queued").seq);
    assert_eq!(events[0].payload["status"], "pending");
    assert_eq!(events[1].payload["status"], "running");
    let completed = only(&events, "execution.completed");
    assert_eq!(completed.payload["status"], "completed");
    assert_eq!(Some(&completed.payload["output"]), done.output.as_ref());

    let steps = h.kernel.steps(&id);
    assert_eq!(steps.len(), 3, "{steps:#?}");
    let search = step_named(&steps, "search");
    let pick = step_named(&steps, "pick");
    let summarize = step_named(&steps, "summarize");
    for (step, kind, args, result) in [
        (search, "tool_call", json!({"query": "rust"}), found.clone()),
        (pick, "local", json!({"found": found}), json!(2)),
        (
            summarize,
            "tool_call",
            json!({"items": found, "limit": 2}),
            json!("rust-1 | rust-2"),
        ),
    ] {
        assert_eq!(step.kind, kind, "{step:?}");
        assert_eq!(step.status, "succeeded", "{step:?}");
        assert_eq!(step.idempotency, "safe_to_retry", "{step:?}");
        assert_eq!(step.occurrence, 0, "{step:?}");
        assert_eq!(step.args.as_ref(), Some(&args), "{step:?}");
        assert_eq!(step.result.as_ref(), Some(&result), "{step:?}");
        assert_eq!(step_history(&events, step), STEP_RUN, "{}", step.target);
        let allowed = step_event(&events, step, "step.allowed");
        assert_eq!(allowed["rule_id"], "permissive", "no bundle: {allowed}");
    }
    // The three steps ran in handler order: search, pick, summarize.
    let order: Vec<&str> = events
        .iter()
        .filter(|e| e.kind == "step.proposed")
        .map(|e| e.payload["target"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["search", "pick", "summarize"]);

    for marker in ["search.ran", "pick.ran", "summarize.ran"] {
        assert_eq!(h.marks(marker).len(), 1, "{marker} ran once");
    }

    // The SDK published its metadata (PUT /v0/agents/{id}/metadata, signed): the input schema
    // derived from the handler's signature.
    let agent: Value = reqwest::get(format!("{}/v0/agents/interop-tools", h.kernel.url()))
        .await
        .expect("GET agent")
        .json()
        .await
        .expect("agent JSON");
    assert_eq!(agent["description"], "Searches, picks and summarizes.");
    assert_eq!(
        agent["input_schema"]["properties"]["query"]["type"],
        "string"
    );
    assert_eq!(agent["input_schema"]["required"], json!(["query"]));
}

// ---------------------------------------------------------------------------------------------
// b. at_most_once across a crash
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_at_most_once_tool_killed_mid_call_comes_back_indeterminate_on_redelivery() {
    let mut h = Interop::start("crash").await;
    let first = h.serve("crash_agent", "interop-crash", None).await;
    let first_pid = h.agents[first].pid();

    let id = h.create("interop-crash", json!({"cents": 1250})).await;
    let started = h.wait_mark("charge.started").await;
    assert_eq!(started, [format!("{first_pid} order-42")]);

    let steps = h.kernel.steps(&id);
    let charge = step_named(&steps, "charge_card");
    assert_eq!(charge.status, "executing", "{charge:?}");
    assert_eq!(charge.idempotency, "at_most_once");
    assert_eq!(
        charge.args.as_ref(),
        Some(&json!({"order": "order-42", "cents": 1250}))
    );

    // Crash: SIGKILL while the body runs, then a fresh process takes over the agent id.
    h.kill(first);
    let second = h.serve("crash_agent", "interop-crash", None).await;
    let attempt = h
        .kernel
        .redeliver(&id)
        .expect("the dispatch is still in flight");
    assert_eq!(attempt, 2);

    let done = h.wait_terminal(&id).await;
    assert_eq!(done.status, ExecutionStatus::Failed, "{done:?}");
    // The SDK raises ToolError(message) for the replayed error; uncaught, the handler fails
    // the execution with `tool_error: <tool>: <message>`.
    assert_eq!(
        done.failure_reason,
        format!("tool_error: charge_card: {INDETERMINATE}")
    );

    let events = from_kernel(h.kernel.events(&id));
    let mut expected = vec!["execution.created", "execution.started", "dispatch.queued"];
    expected.extend(STEP_RUN); // new_order, replayed (no new events) by the second process
    expected.extend(["step.proposed", "step.allowed", "step.executing"]); // charge_card
    expected.extend(["step.failed", "execution.failed"]);
    assert_eq!(kinds_without_acks(&events), expected);
    let dispatch = queued(&events, &id).remove(0);
    assert_eq!(acks(&events), [(dispatch.clone(), 1), (dispatch, 2)]);

    let steps = h.kernel.steps(&id);
    let charge = step_named(&steps, "charge_card");
    assert_eq!(charge.status, "failed");
    let error = json!({"reason": "indeterminate", "message": INDETERMINATE});
    assert_eq!(charge.error.as_ref(), Some(&error));
    assert_eq!(charge.result, None);
    assert_eq!(
        step_history(&events, charge),
        [
            "step.proposed",
            "step.allowed",
            "step.executing",
            "step.failed"
        ]
    );
    assert_eq!(step_event(&events, charge, "step.failed")["error"], error);
    let order = step_named(&steps, "new_order");
    assert_eq!(order.status, "succeeded");
    assert_eq!(order.result, Some(json!("order-42")));
    let failed = only(&events, "execution.failed");
    assert_eq!(failed.payload["reason"], done.failure_reason.as_str());

    // Neither body ran in the second process: new_order replayed, charge_card was refused.
    assert_eq!(h.marks("charge.started").len(), 1);
    assert_eq!(h.marks("order.ran"), [format!("{first_pid} ")]);
    // Each process ran the handler once: the first up to the kill, the second to the end.
    let second_pid = h.agents[second].pid();
    assert_eq!(
        h.marks("handle.ran"),
        [format!("{first_pid} 1250"), format!("{second_pid} 1250")]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_handler_whose_dispatch_was_redelivered_is_fenced_off() {
    let mut h = Interop::start("lease").await;
    let old = h.serve("lease_agent", "interop-lease", None).await;
    let old_pid = h.agents[old].pid();
    let id = h
        .create("interop-lease", json!({"url": "https://example.test/a"}))
        .await;
    h.wait_mark("fetch.started").await;

    // The old process is alive but slow; its dispatch is re-delivered to a new process.
    let new = h.serve("lease_agent", "interop-lease", None).await;
    let new_pid = h.agents[new].pid();
    assert_eq!(h.kernel.redeliver(&id).expect("in flight"), 2);
    for _ in 0..(WAIT.as_millis() / 25) {
        if h.marks("fetch.started").len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let url = "https://example.test/a";
    assert_eq!(
        h.marks("fetch.started"),
        [format!("{old_pid} {url}"), format!("{new_pid} {url}")],
        "a safe_to_retry step left executing runs again in the new attempt"
    );

    // The old attempt finishes first: its step outcome is refused with 409 lease_superseded,
    // which the SDK raises as LeaseSuperseded and swallows without failing the execution.
    fs::write(h.dir.join(format!("release.{old_pid}")), "").unwrap();
    assert_eq!(
        h.wait_mark("superseded").await,
        [format!("{old_pid} {url}")]
    );
    let now = h.kernel.execution(&id).unwrap();
    assert_eq!(now.status, ExecutionStatus::Running, "{now:?}");

    fs::write(h.dir.join(format!("release.{new_pid}")), "").unwrap();
    let done = h.wait_terminal(&id).await;
    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    assert_eq!(
        done.output,
        Some(json!({"page": "body of https://example.test/a"}))
    );
    let events = from_kernel(h.kernel.events(&id));
    let mut expected = vec!["execution.created", "execution.started", "dispatch.queued"];
    expected.extend(STEP_RUN);
    expected.push("execution.completed");
    assert_eq!(kinds_without_acks(&events), expected);
    let dispatch = queued(&events, &id).remove(0);
    assert_eq!(acks(&events), [(dispatch.clone(), 1), (dispatch, 2)]);
    let steps = h.kernel.steps(&id);
    let fetch = step_named(&steps, "fetch");
    assert_eq!(fetch.status, "succeeded");
    assert_eq!(fetch.result, Some(json!("body of https://example.test/a")));
}

// ---------------------------------------------------------------------------------------------
// c. require_approval, granted through rebuno::client::Client
// ---------------------------------------------------------------------------------------------

const APPROVAL_POLICY: &str = "\
default_action: allow
rules:
  - id: gate-publish
    when: { target: publish }
    then:
      decision: require_approval
      reason: publishing needs a human
      approval_config: { approvers: [alice], timeout: 5m, message: check the post }
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_python_tool_blocks_until_granted_through_the_rust_client() {
    let mut h = Interop::start("approval").await;
    h.serve("approval_agent", "interop-approval", Some(APPROVAL_POLICY))
        .await;
    let client = h.client();

    let created = client
        .create("interop-approval")
        .input(json!({"text": "hello world"}))
        .send()
        .await
        .expect("create through rebuno::client::Client");
    let id: Uuid = created.id.parse().expect("uuid");
    h.watch(&id.to_string());
    h.wait_status(&id.to_string(), |s| s == ExecutionStatus::Blocked)
        .await;

    let pending = client.approvals().send().await.expect("approvals");
    assert_eq!(pending.len(), 1, "{pending:?}");
    let approval = &pending[0];
    let steps = h.kernel.steps(&id.to_string());
    let publish = step_named(&steps, "publish");
    assert_eq!(publish.status, "awaiting_approval");
    assert_eq!(approval.execution_id, created.id);
    assert_eq!(approval.step_id, publish.step_id);
    assert_eq!(approval.status, ApprovalStatus::Pending);
    assert_eq!(approval.approvers, ["alice"]);
    assert_eq!(approval.message.as_deref(), Some("check the post"));
    assert!(
        h.marks("publish.ran").is_empty(),
        "not run before the grant"
    );

    let refused = client
        .grant(&approval.id)
        .by("mallory")
        .rationale("me too")
        .send()
        .await
        .expect_err("mallory is not an approver");
    assert_eq!(refused.code(), Some("forbidden"), "{refused}");
    client
        .grant(&approval.id)
        .by("alice")
        .rationale("ship it")
        .send()
        .await
        .expect("grant");

    let done = client.wait(&created.id, WAIT).await.expect("wait");
    assert_eq!(
        done.status,
        rebuno::wire::ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    assert_eq!(
        done.output,
        Some(json!({"post": "HELLO WORLD", "receipt": "published: HELLO WORLD"}))
    );

    let events = from_client(client.all_events(&created.id).await.expect("events"));
    let mut expected = vec!["execution.created", "execution.started", "dispatch.queued"];
    expected.extend(STEP_RUN); // draft
    expected.extend([
        "step.proposed",
        "step.awaiting_approval",
        "approval.requested",
        "execution.blocked",
        "approval.granted",
        "step.allowed",
        "execution.resumed",
        "dispatch.queued",
        "step.executing",
        "step.succeeded",
        "execution.completed",
    ]);
    assert_eq!(kinds_without_acks(&events), expected);
    let dispatches = queued(&events, &created.id);
    assert_eq!(dispatches.len(), 2);
    assert_ne!(
        dispatches[0], dispatches[1],
        "the resume queues a new dispatch"
    );
    assert!(
        acks(&events).contains(&(dispatches[1].clone(), 1)),
        "the resumed dispatch was delivered"
    );

    let steps = h.kernel.steps(&id.to_string());
    let publish = step_named(&steps, "publish");
    assert_eq!(publish.status, "succeeded");
    assert_eq!(publish.result, Some(json!("published: HELLO WORLD")));
    assert_eq!(
        step_history(&events, publish),
        [
            "step.proposed",
            "step.awaiting_approval",
            "step.allowed",
            "step.executing",
            "step.succeeded"
        ]
    );
    let gated = step_event(&events, publish, "step.awaiting_approval");
    assert_eq!(gated["rule_id"], "gate-publish");
    assert_eq!(gated["reason"], "publishing needs a human");
    assert_eq!(gated["policy_hash"], sha256_hex(APPROVAL_POLICY));
    let draft = step_named(&steps, "draft");
    assert_eq!(draft.kind, "local");
    assert_eq!(
        step_event(&events, draft, "step.allowed")["rule_id"],
        "local"
    );

    let requested = only(&events, "approval.requested");
    assert_eq!(requested.payload["approval_id"], approval.id.as_str());
    assert_eq!(requested.payload["step_id"], publish.step_id.as_str());
    assert_eq!(requested.payload["status"], "pending");
    let blocked = only(&events, "execution.blocked");
    assert_eq!(blocked.payload["status"], "blocked");
    assert!(
        blocked.payload.get("reason").is_none(),
        "an approval block has no reason: {blocked:?}"
    );
    let granted = only(&events, "approval.granted");
    assert_eq!(granted.payload["approval_id"], approval.id.as_str());
    assert_eq!(granted.payload["status"], "granted");
    assert_eq!(granted.payload["decided_by"], "alice");
    assert_eq!(granted.payload["rationale"], "ship it");
    assert_eq!(
        only(&events, "execution.resumed").payload["status"],
        "running"
    );

    let decided = client.approval(&approval.id).await.expect("approval");
    assert_eq!(decided.status, ApprovalStatus::Granted);
    assert_eq!(decided.decided_by.as_deref(), Some("alice"));
    assert_eq!(decided.rationale.as_deref(), Some("ship it"));

    // The rerun replayed the draft and ran the approved body once.
    assert_eq!(h.marks("draft.ran").len(), 1);
    assert_eq!(h.marks("publish.ran").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_approval_resumes_with_the_refusal_and_a_cancel_expires_the_next() {
    let mut h = Interop::start("approval-deny").await;
    h.serve("approval_agent", "interop-approval", Some(APPROVAL_POLICY))
        .await;
    let client = h.client();

    // Denied: the execution resumes and the rerun's call returns the SDK's refusal string.
    let id = h
        .create("interop-approval", json!({"text": "first post"}))
        .await;
    h.wait_status(&id, |s| s == ExecutionStatus::Blocked).await;
    let pending = client.approvals().send().await.expect("approvals");
    assert_eq!(pending.len(), 1, "{pending:?}");
    client
        .deny(&pending[0].id)
        .by("alice")
        .rationale("not today")
        .send()
        .await
        .expect("deny");
    let done = h.wait_terminal(&id).await;
    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    assert_eq!(
        done.output,
        Some(json!({
            "post": "FIRST POST",
            "receipt": "publish not allowed. reason: [policy_denied] not today (HTTP 403)",
        }))
    );
    let events = from_kernel(h.kernel.events(&id));
    let mut expected = vec!["execution.created", "execution.started", "dispatch.queued"];
    expected.extend(STEP_RUN); // draft
    expected.extend([
        "step.proposed",
        "step.awaiting_approval",
        "approval.requested",
        "execution.blocked",
        "approval.denied",
        "step.denied",
        "execution.resumed",
        "dispatch.queued",
        "execution.completed",
    ]);
    assert_eq!(kinds_without_acks(&events), expected);
    let steps = h.kernel.steps(&id);
    let publish = step_named(&steps, "publish");
    assert_eq!(publish.status, "denied");
    assert_eq!(publish.error, Some(json!({"reason": "not today"})));
    assert_eq!(
        step_event(&events, publish, "step.denied")["error"],
        json!({"reason": "not today"})
    );
    let denied = only(&events, "approval.denied");
    assert_eq!(denied.payload["status"], "denied");
    assert_eq!(denied.payload["decided_by"], "alice");
    assert_eq!(denied.payload["rationale"], "not today");
    assert!(
        h.marks("publish.ran").is_empty(),
        "a denied body never runs"
    );

    // Cancelled while blocked: the approval expires and the gated step is denied.
    let id = h
        .create("interop-approval", json!({"text": "second post"}))
        .await;
    h.wait_status(&id, |s| s == ExecutionStatus::Blocked).await;
    let pending = client.approvals().send().await.expect("approvals");
    assert_eq!(pending.len(), 1, "{pending:?}");
    client.cancel(&id).await.expect("cancel");
    let done = h.wait_terminal(&id).await;
    assert_eq!(done.status, ExecutionStatus::Cancelled);
    let events = from_kernel(h.kernel.events(&id));
    let tail: Vec<&str> = kinds_without_acks(&events)
        .into_iter()
        .skip_while(|k| *k != "execution.blocked")
        .collect();
    assert_eq!(
        tail,
        [
            "execution.blocked",
            "approval.expired",
            "step.denied",
            "execution.cancelled"
        ]
    );
    let expired = only(&events, "approval.expired");
    assert_eq!(expired.payload["approval_id"], pending[0].id.as_str());
    assert_eq!(expired.payload["status"], "expired");
    assert_eq!(expired.payload["rationale"], "execution_cancelled");
    let cancelled = only(&events, "execution.cancelled");
    assert_eq!(cancelled.payload["reason"], "client_cancelled");
    assert_eq!(cancelled.payload["status"], "cancelled");
    let steps = h.kernel.steps(&id);
    let publish = step_named(&steps, "publish");
    assert_eq!(publish.status, "denied");
    assert_eq!(
        publish.error,
        Some(json!({"reason": "execution_cancelled"}))
    );
    let expired = client
        .approval(&pending[0].id)
        .await
        .expect("the expired approval");
    assert_eq!(expired.status, ApprovalStatus::Expired);
    let refused = client.cancel(&id).await.expect_err("already terminal");
    assert_eq!(refused.code(), Some("conflict"), "{refused}");
}

// ---------------------------------------------------------------------------------------------
// d. policy denial
// ---------------------------------------------------------------------------------------------

const DENY_POLICY: &str = "\
default_action: deny
rules:
  - id: allow-reads
    when: { target: count_rows }
    then: { decision: allow, reason: reads are fine }
  - id: no-user-deletes
    when: { target: delete_all, arguments: { table: { equals: users } } }
    then: { decision: deny, reason: deleting users is forbidden }
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_python_tool_returns_the_refusal_string_as_its_result() {
    let mut h = Interop::start("deny").await;
    h.serve("deny_agent", "interop-deny", Some(DENY_POLICY))
        .await;

    let id = h.create("interop-deny", json!({"table": "users"})).await;
    let done = h.wait_terminal(&id).await;

    // The @tool wrapper catches PolicyError and returns f"{tool} not allowed. reason: {err}",
    // where str(PolicyError) is APIError's "[policy_denied] <reason> (HTTP 403)".
    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    assert_eq!(
        done.output,
        Some(json!({
            "rows": 7,
            "named_rule": "delete_all not allowed. reason: [policy_denied] deleting users is forbidden (HTTP 403)",
            "default_rule": "delete_all not allowed. reason: [policy_denied] no explicit allow rule matched (HTTP 403)",
        }))
    );

    let events = from_kernel(h.kernel.events(&id));
    let mut expected = vec!["execution.created", "execution.started", "dispatch.queued"];
    expected.extend(STEP_RUN); // count_rows
    expected.extend(["step.proposed", "step.denied"]); // delete_all(users)
    expected.extend(["step.proposed", "step.denied"]); // delete_all(logs)
    expected.push("execution.completed");
    assert_eq!(kinds_without_acks(&events), expected);

    let steps = h.kernel.steps(&id);
    let count = step_named(&steps, "count_rows");
    let allowed = step_event(&events, count, "step.allowed");
    assert_eq!(allowed["rule_id"], "allow-reads");
    assert_eq!(allowed["reason"], "reads are fine");
    assert_eq!(allowed["policy_hash"], sha256_hex(DENY_POLICY));

    let deletes = steps_named(&steps, "delete_all");
    assert_eq!(deletes.len(), 2);
    for (table, rule, reason) in [
        ("users", "no-user-deletes", "deleting users is forbidden"),
        ("logs", "default", "no explicit allow rule matched"),
    ] {
        let step = deletes
            .iter()
            .find(|s| s.args == Some(json!({"table": table})))
            .unwrap_or_else(|| panic!("no delete_all({table}) step: {deletes:#?}"));
        let error = json!({"reason": reason, "rule_id": rule});
        assert_eq!(step.status, "denied", "{step:?}");
        assert_eq!(step.error.as_ref(), Some(&error), "{step:?}");
        assert_eq!(step.result, None);
        assert_eq!(step.occurrence, 0);
        assert_eq!(
            step_history(&events, step),
            ["step.proposed", "step.denied"]
        );
        let denied = step_event(&events, step, "step.denied");
        assert_eq!(denied["rule_id"], rule);
        assert_eq!(denied["error"], error);
        assert_eq!(denied["policy_hash"], sha256_hex(DENY_POLICY));
    }
    assert_eq!(h.marks("count_rows.ran").len(), 1);
    assert!(
        h.marks("delete_all.ran").is_empty(),
        "a denied body never runs"
    );
}

// ---------------------------------------------------------------------------------------------
// e. subagents in a session
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_subagent_session_carries_state_across_parent_executions() {
    let mut h = Interop::start("subagent").await;
    h.serve("chat_agent", "interop-chat", None).await;
    h.serve("lead_agent", "interop-lead", None).await;
    let client = h.client();

    let mut children: Vec<rebuno::wire::Execution> = Vec::new();
    for (turn, question) in [(1, "hello"), (2, "again")] {
        let id = h
            .create(
                "interop-lead",
                json!({"question": question, "thread": "thread-7"}),
            )
            .await;
        let done = h.wait_terminal(&id).await;
        assert_eq!(
            done.status,
            ExecutionStatus::Completed,
            "turn {turn}: {}",
            done.failure_reason
        );

        // The parent suspended while the child ran, then reran and replayed the tool.
        let events = from_kernel(h.kernel.events(&id));
        let expected = [
            "execution.created",
            "execution.started",
            "dispatch.queued",
            "step.proposed",
            "step.allowed",
            "step.executing",
            "execution.blocked",
            "step.succeeded",
            "execution.resumed",
            "dispatch.queued",
            "execution.completed",
        ];
        assert_eq!(kinds_without_acks(&events), expected, "turn {turn}");
        assert_eq!(
            only(&events, "execution.blocked").payload["reason"],
            "awaiting_steps"
        );
        let dispatches = queued(&events, &id);
        assert!(acks(&events).contains(&(dispatches[1].clone(), 1)));

        let page = client
            .list()
            .agent_id("interop-chat")
            .session("thread-7")
            .send()
            .await
            .expect("list children");
        assert_eq!(page.executions.len(), turn, "{page:?}");
        let child = page.executions[0].clone(); // newest first
        let child_id: Uuid = child.id.parse().unwrap();
        h.watch(&child_id.to_string());

        let steps = h.kernel.steps(&id);
        let consult = step_named(&steps, "consult");
        assert_eq!(consult.status, "succeeded");
        assert_eq!(
            consult.args,
            Some(json!({"question": question, "thread": "thread-7"}))
        );
        let spawned = child.spawned_by.as_ref().expect("spawned_by");
        assert_eq!(spawned.execution_id, id.to_string());
        assert_eq!(spawned.step_id, consult.step_id);
        assert_eq!(child.session.as_deref(), Some("thread-7"));
        assert_eq!(
            child.idempotency_key.as_deref(),
            Some(consult.step_id.as_str()),
            "a subagent's idempotency key defaults to the spawning step"
        );
        assert_eq!(child.status, rebuno::wire::ExecutionStatus::Completed);
        assert_eq!(
            consult.result, child.output,
            "the step settled with the output"
        );
        assert_eq!(done.output, Some(json!({"answer": child.output})));

        let previous = if turn == 1 {
            Value::Null
        } else {
            json!({"turns": 1, "last": "hello"})
        };
        let mood = if turn == 1 { "curious" } else { "familiar" };
        assert_eq!(
            child.output,
            Some(json!({
                "reply": format!("turn {turn}: {question}"),
                "mood": mood,
                "previous": previous,
            }))
        );

        let child_events = from_kernel(h.kernel.events(&child_id.to_string()));
        let created = only(&child_events, "execution.created");
        assert_eq!(created.payload["session"], "thread-7");
        assert_eq!(
            created.payload["spawned_by"]["step_id"],
            consult.step_id.as_str()
        );
        let started = only(&child_events, "execution.started");
        assert_eq!(started.payload["session"], "thread-7");
        match children.last() {
            None => assert!(started.payload.get("parent_execution_id").is_none()),
            Some(before) => {
                assert_eq!(started.payload["parent_execution_id"], before.id.as_str());
                assert_eq!(
                    child.parent_execution_id.as_deref(),
                    Some(before.id.as_str())
                );
            }
        }
        let mut expected = vec!["execution.created", "execution.started", "dispatch.queued"];
        expected.extend(STEP_RUN); // mood
        expected.push("execution.completed");
        assert_eq!(kinds_without_acks(&child_events), expected);
        children.push(child);
    }
    assert_eq!(h.marks("chat.ran").len(), 2, "one child body per turn");
}

// ---------------------------------------------------------------------------------------------
// f. resources and forks
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_resource_is_checkpointed_and_restored_in_a_fork() {
    let mut h = Interop::start("resource").await;
    h.serve("resource_agent", "interop-resource", None).await;
    let client = h.client();

    let notes = json!({"notes": [
        {"name": "a.txt", "text": "alpha"},
        {"name": "b.txt", "text": "beta"},
    ]});
    let id = h.create("interop-resource", notes).await;
    let done = h.wait_terminal(&id).await;
    let output = json!({
        "listings": [["a.txt"], ["a.txt", "b.txt"]],
        "files": {"a.txt": "alpha", "b.txt": "beta"},
    });
    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    assert_eq!(done.output, Some(output.clone()));

    let events = from_kernel(h.kernel.events(&id));
    let registered = only(&events, "resource.registered");
    assert_eq!(registered.payload["key"], "ws");
    assert_eq!(registered.payload["driver_id"], "interop-dir");
    assert_eq!(
        registered.payload["configuration"],
        json!({"layout": "flat"})
    );
    assert_eq!(registered.payload["coverage_reuse"], false);
    assert_eq!(registered.payload["every_steps"], 1);
    assert_eq!(registered.payload["on_completion"], true);
    let bound = only(&events, "resource.bound");
    assert_eq!(bound.payload["key"], "ws");
    assert!(bound.payload["binding"]["path"].is_string());

    let steps = h.kernel.steps(&id);
    let writes = steps_named(&steps, "write_note");
    assert_eq!(writes.len(), 2);
    let first = writes
        .iter()
        .find(|s| s.args.as_ref().is_some_and(|a| a["name"] == "a.txt"))
        .expect("write a.txt");
    let url = format!(
        "{}/v0/executions/{id}/steps/{}",
        h.kernel.url(),
        first.step_id
    );
    let served: Value =
        serde_json::from_str(&reqwest::get(url).await.unwrap().text().await.unwrap()).unwrap();
    assert_eq!(served["resources"], json!(["ws"]));
    let executing = step_event(&events, first, "step.executing");
    assert_eq!(executing["resources"], json!(["ws"]));
    assert_eq!(executing["generations"], json!({"ws": 1}));
    // A baseline at registration, then one capture per write, each published with its outcome.
    let captured: Vec<(u64, u64)> = events
        .iter()
        .filter(|e| e.kind == "resource.checkpointed")
        .map(|e| {
            assert_eq!(e.payload["key"], "ws");
            (
                e.payload["generation"].as_u64().unwrap(),
                e.payload["covered_seq"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(captured.len(), 3, "{captured:?}");
    assert_eq!(captured[0], (0, bound.seq), "baseline right after the bind");
    let first_done = events
        .iter()
        .find(|e| e.kind == "step.succeeded" && e.payload["step_id"] == first.step_id.as_str())
        .expect("a.txt written")
        .seq;

    // Every write is captured (every_steps = 1) right with its outcome.
    let points = client.fork_points(&id).await.expect("fork points");
    assert_eq!(points.latest_seq, events.last().unwrap().seq);
    assert_eq!(points.resources.get("ws"), Some(&registered.seq));
    let covering = points
        .checkpoints
        .iter()
        .find(|c| c.covered_seq == first_done)
        .unwrap_or_else(|| panic!("no checkpoint at seq {first_done}: {points:?}"));
    assert_eq!(covering.key, "ws");
    let checkpointed = h.marks("driver.checkpoint");
    assert!(
        checkpointed
            .iter()
            .any(|m| m.ends_with(&format!("{} a.txt", covering.checkpoint_ref))),
        "the driver captured a.txt alone as {}: {checkpointed:?}",
        covering.checkpoint_ref
    );

    // Fork right after the first write: it replays, the second runs live on the restored dir.
    let fork = client
        .fork(id.to_string(), first_done)
        .send()
        .await
        .expect("fork");
    let fork_id: Uuid = fork.id.parse().unwrap();
    h.watch(&fork_id.to_string());
    assert_eq!(fork.forked_from.as_deref(), Some(id.to_string().as_str()));
    assert_eq!(fork.fork_seq, Some(first_done));
    let restoration = fork.restoration.clone().expect("restoration");
    assert_eq!(
        restoration["ws"]["checkpoint_ref"],
        covering.checkpoint_ref.as_str()
    );
    assert_eq!(restoration["ws"]["covered"], true);
    assert_eq!(restoration["ws"]["checkpoint_seq"], first_done);

    let forked = h.wait_terminal(&fork_id.to_string()).await;
    assert_eq!(
        forked.status,
        ExecutionStatus::Completed,
        "{}",
        forked.failure_reason
    );
    assert_eq!(forked.output, Some(output));

    let fork_events = from_kernel(h.kernel.events(&fork_id.to_string()));
    assert_eq!(fork_events[0].kind, "execution.created");
    let marker = &fork_events[1];
    assert_eq!(marker.kind, "execution.forked");
    assert_eq!(marker.payload["source_execution_id"], id.to_string());
    assert_eq!(marker.payload["fork_seq"], first_done);
    assert_eq!(marker.payload["restoration"], restoration);
    let fork_steps = h.kernel.steps(&fork_id.to_string());
    let fork_writes = steps_named(&fork_steps, "write_note");
    assert_eq!(fork_writes.len(), 2);
    for step in &fork_writes {
        assert_eq!(step.status, "succeeded");
        assert_ne!(
            step.step_id, first.step_id,
            "copied steps get the fork's ids"
        );
    }
    let copied = fork_writes
        .iter()
        .find(|s| s.args.as_ref().is_some_and(|a| a["name"] == "a.txt"))
        .unwrap();
    let started = only(&fork_events, "execution.started").seq;
    // PROTOCOL.md §1.8: the prefix's registration and settled steps are copied, then the
    // restored resource is initialized from its checkpoint, then every checkpoint by the fork
    // point is copied (the baseline, ended by the copied write, and the covering one; Go:
    // TestForkAtACapturedOutcomeLogsItsCheckpoint), then the fork starts.
    let prefix: Vec<&str> = fork_events
        .iter()
        .take_while(|e| e.seq <= started)
        .map(|e| e.kind.as_str())
        .collect();
    let mut expected = vec![
        "execution.created",
        "execution.forked",
        "resource.registered",
    ];
    expected.extend(STEP_RUN);
    expected.extend([
        "resource.initialized",
        "resource.checkpointed",
        "resource.checkpointed",
        "execution.started",
    ]);
    assert_eq!(prefix, expected);
    let initialized = only(&fork_events, "resource.initialized");
    assert_eq!(initialized.payload["key"], "ws");
    assert_eq!(
        initialized.payload["checkpoint_ref"],
        covering.checkpoint_ref.as_str()
    );
    assert_eq!(initialized.payload["generation"], covering.generation);
    assert!(
        fork_events
            .iter()
            .filter(|e| e.payload["step_id"] == copied.step_id.as_str())
            .all(|e| e.seq < started),
        "a.txt is a copied step that replays: {fork_events:?}"
    );

    // Bodies: a and b in the source, only b in the fork; the fork's dir came from the checkpoint.
    let ran: Vec<String> = h
        .marks("write_note.ran")
        .iter()
        .map(|m| m.split_once(' ').unwrap().1.to_owned())
        .collect();
    assert_eq!(ran, ["a.txt", "b.txt", "b.txt"]);
    let created: Vec<String> = h
        .marks("driver.create")
        .iter()
        .map(|m| m.split_once(' ').unwrap().1.to_owned())
        .collect();
    assert_eq!(created, ["-".to_owned(), covering.checkpoint_ref.clone()]);
    // The restored resource is covered, so the fork captures no baseline: only after b.txt.
    assert_eq!(h.marks("driver.checkpoint").len(), 3 + 1);
    let fork_bound = only(&fork_events, "resource.bound");
    assert!(fork_bound.seq > started, "the fork binds its own directory");
    assert_ne!(fork_bound.payload["binding"], bound.payload["binding"]);
}

// ---------------------------------------------------------------------------------------------
// f. durable LLM calls across SDKs
// ---------------------------------------------------------------------------------------------

use crate::support::llm_stub;

/// The OpenAI-style chat content of an answer: `choices[0].message.content`, or the
/// concatenated `choices[0].delta.content` of an event stream.
fn chat_content(raw: &str, streamed: bool) -> Value {
    if !streamed {
        let body: Value = serde_json::from_str(raw).unwrap_or_default();
        return body["choices"][0]["message"]["content"].clone();
    }
    let text: String = raw
        .split("\n\n")
        .filter_map(|event| event.strip_prefix("data:"))
        .map(str::trim)
        .filter(|data| *data != "[DONE]")
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|event| {
            event["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    json!(text)
}

/// The Rust twin of `llm_agent.py`: the same request through `rebuno::llm::fetch`, the same
/// output shape; it hangs after the call on its first delivery when asked to.
async fn rust_llm_call(input: Value) -> Result<Value, rebuno::HandlerError> {
    let streamed = input["stream"].as_bool().unwrap_or(false);
    let body = json!({
        "model": "gpt-test",
        "messages": [{ "role": "user", "content": input["prompt"].as_str().unwrap_or("hi") }],
        "stream": streamed,
    });
    let request = http::Request::post(input["url"].as_str().unwrap_or_default())
        .header("content-type", "application/json")
        .body(bytes::Bytes::from(body.to_string()))?;
    let response = rebuno::llm::fetch(request).await?;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let raw = response.into_body().text().await?;
    if input["hang"] == true && rebuno::execution()?.dispatch_attempt() == 1 {
        std::future::pending::<()>().await;
    }
    Ok(json!({
        "content": if status < 400 { chat_content(&raw, streamed) } else { Value::Null },
        "raw": raw,
        "status": status,
        "content_type": content_type,
        "sdk": "rust",
    }))
}

impl Interop {
    /// Serves the Rust twin of `llm_agent.py` and points `interop-llm` at it.
    async fn serve_rust_llm_agent(&self) -> tokio::task::JoinHandle<std::io::Result<()>> {
        let agent = rebuno::Agent::builder("interop-llm")
            .secret(SECRET)
            .base_url(self.kernel.url())
            .handler(rust_llm_call)
            .build()
            .expect("rust agent");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let webhook = format!("http://{}/webhook", listener.local_addr().unwrap());
        self.kernel
            .register_agent(AgentSpec::new("interop-llm", webhook, SECRET))
            .expect("register the rust agent");
        tokio::spawn(std::future::IntoFuture::into_future(rebuno_hyper::serve(
            listener, agent,
        )))
    }

    async fn wait_event(&self, id: &str, kind: &str) {
        for _ in 0..3000 {
            if self.kernel.events(id).iter().any(|e| e.kind == kind) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no {kind} for {id}\n{}", self.diagnostics());
    }
}

/// The one `llm_call` step's record, checked for the shape both SDKs write.
fn llm_record(steps: &[StepRecord], streamed: bool) -> Value {
    let step = step_named(steps, "gpt-test");
    assert_eq!(
        (step.kind.as_str(), step.status.as_str()),
        ("llm_call", "succeeded")
    );
    assert_eq!(step.idempotency, "safe_to_retry");
    let record = step.result.clone().expect("a recorded answer");
    let content_type = if streamed {
        "text/event-stream"
    } else {
        "application/json"
    };
    assert_eq!(record["status"], 200);
    assert_eq!(record["headers"], json!({ "content-type": content_type }));
    record
}

/// Records an answer with the agent serving `interop-llm` now (which hangs after recording),
/// then re-delivers to `switch`'s agent and returns what that one handed its handler.
async fn record_then_replay_elsewhere(
    h: &mut Interop,
    stub: &llm_stub::LlmStub,
    streamed: bool,
    switch: impl AsyncFnOnce(&mut Interop),
) -> (Value, Value) {
    let input = json!({ "url": stub.chat_url(), "stream": streamed, "prompt": "hi", "hang": true });
    let id = h.create("interop-llm", input).await;
    h.wait_event(&id, "step.succeeded").await;
    let hits = stub.hits();
    switch(h).await;
    h.kernel.redeliver(&id).expect("redeliver");
    let done = h.wait_terminal(&id).await;
    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    assert_eq!(stub.hits(), hits, "the replay did not call the provider");
    let record = llm_record(&h.kernel.steps(&id), streamed);
    (record, done.output.expect("output"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_llm_call_recorded_by_python_replays_byte_for_byte_in_rust_and_back() {
    let stub = llm_stub::LlmStub::start().await;
    stub.set_reply("Grüße ☕ from the stub, in several chunks");
    let mut h = Interop::start("llm").await;

    for streamed in [false, true] {
        // Python records, Rust replays.
        h.serve("llm_agent", "interop-llm", None).await;
        let (record, output) = record_then_replay_elsewhere(&mut h, &stub, streamed, async |h| {
            h.rust_agent = Some(h.serve_rust_llm_agent().await);
        })
        .await;
        assert_eq!(output["sdk"], "rust", "the Rust agent replayed");
        assert_eq!(
            output["raw"], record["body"],
            "python → rust, stream={streamed}"
        );
        assert_eq!(output["content"], json!(stub.reply()));
        assert_eq!(output["content_type"], record["headers"]["content-type"]);

        // Rust records, Python replays.
        let (record, output) = record_then_replay_elsewhere(&mut h, &stub, streamed, async |h| {
            h.serve("llm_agent", "interop-llm", None).await;
        })
        .await;
        assert_eq!(output["sdk"], "python", "the Python agent replayed");
        assert_eq!(
            output["raw"], record["body"],
            "rust → python, stream={streamed}"
        );
        assert_eq!(output["content"], json!(stub.reply()));
        assert_eq!(output["status"], 200);
    }
    assert_eq!(stub.hits(), 4, "each answer was fetched once");
}

// ---------------------------------------------------------------------------------------------
// g. a Python history replayed against a Rust twin
// ---------------------------------------------------------------------------------------------

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rebuno::{Agent, AgentBuilder, HandlerError, Idempotency, Tool, define_tool};
use rebuno_devkernel::replay::{self, Ending, History, Verdict};
use serde::{Deserialize, Serialize};

/// `replay_agent.py`'s query: non-ASCII text (the SDK sends it `\u`-escaped, Rust as UTF-8)
/// and characters Go's encoder escapes, all canonicalized to the same identity by the kernel.
const REPLAY_QUERY: &str = "grüße <🦀> & co";

/// `search`'s args as the Python `@tool` records them: every parameter, defaults applied.
#[derive(Serialize, Deserialize)]
struct SearchArgs {
    query: String,
    limit: u32,
    /// A float both SDKs write alike. Not all do: the kernel hashes number literals verbatim,
    /// and for magnitudes in [1e-9, 1e-4) Python's `json.dumps` writes `1e-05` / `1.5e-07`
    /// where serde_json writes `0.00001` / `1.5e-7`, so such an arg gets another step id.
    min_score: f64,
}

#[derive(Serialize, Deserialize)]
struct DigestArgs {
    to: String,
    subject: String,
    items: Vec<String>,
}

#[derive(Deserialize)]
struct ReplayInput {
    query: String,
    to: String,
}

/// How often each body of the Rust twin ran (a replay check runs none).
#[derive(Clone, Default)]
struct TwinRuns {
    search: Arc<AtomicUsize>,
    send: Arc<AtomicUsize>,
    pick: Arc<AtomicUsize>,
    batch: Arc<AtomicUsize>,
}

impl TwinRuns {
    fn total(&self) -> usize {
        [&self.search, &self.send, &self.pick, &self.batch]
            .iter()
            .map(|n| n.load(Ordering::SeqCst))
            .sum()
    }
}

#[derive(Clone)]
struct Twin {
    runs: TwinRuns,
    subject: &'static str,
    search: Tool<SearchArgs, Vec<String>>,
    send: Tool<DigestArgs, String>,
}

/// The Rust twin of `replay_agent.py`: the same agent id, tools (names, args, idempotency),
/// local steps, order and output; `subject` is the digest's subject ("Weekly digest" there).
fn rust_replay_twin(runs: &TwinRuns, subject: &'static str) -> AgentBuilder {
    let searched = Arc::clone(&runs.search);
    let search = define_tool("search").execute(move |args: SearchArgs| {
        searched.fetch_add(1, Ordering::SeqCst);
        async move {
            let found: Vec<String> = (1..=args.limit)
                .map(|i| format!("{}-{i}", args.query))
                .collect();
            Ok::<_, HandlerError>(found)
        }
    });
    let sent = Arc::clone(&runs.send);
    let send = define_tool("send_digest")
        .idempotency(Idempotency::AtMostOnce)
        .execute(move |args: DigestArgs| {
            sent.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, HandlerError>(format!("sent {} to {}", args.items.len(), args.to)) }
        });
    let twin = Twin {
        runs: runs.clone(),
        subject,
        search,
        send,
    };
    Agent::builder("interop-replay").handler_with_state(
        twin,
        |t: Twin, input: ReplayInput| async move {
            let search = SearchArgs {
                query: input.query,
                limit: 3,
                min_score: 0.25,
            };
            let found = t.search.call(search).await?;
            let picks = Arc::clone(&t.runs.pick);
            let count = found.len();
            let picked: usize = rebuno::Step::new("pick")
                .args(json!({ "found": found }))
                .run(|| async move {
                    picks.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, HandlerError>(count - 1)
                })
                .await?;
            let batches = Arc::clone(&t.runs.batch);
            let batch: String = rebuno::step("batch", || async move {
                batches.fetch_add(1, Ordering::SeqCst);
                Ok::<_, HandlerError>("batch-7".to_owned())
            })
            .await?;
            let digest = DigestArgs {
                to: input.to,
                subject: t.subject.to_owned(),
                items: found[..picked].to_vec(),
            };
            let receipt = t.send.call(digest).await?;
            Ok::<_, HandlerError>(
                json!({ "found": found, "picked": picked, "batch": batch, "receipt": receipt }),
            )
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_recorded_by_python_replays_against_a_rust_twin_and_a_changed_arg_is_named() {
    let mut h = Interop::start("replay").await;
    h.serve("replay_agent", "interop-replay", None).await;
    let to = "ada@example.com";
    let id = h
        .create("interop-replay", json!({ "query": REPLAY_QUERY, "to": to }))
        .await;
    let done = h.wait_terminal(&id).await;
    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    let found: Vec<String> = (1..=3).map(|i| format!("{REPLAY_QUERY}-{i}")).collect();
    let output = json!({
        "found": found,
        "picked": 2,
        "batch": "batch-7",
        "receipt": format!("sent 2 to {to}"),
    });
    assert_eq!(done.output, Some(output.clone()));
    for marker in ["search.ran", "pick.ran", "batch.ran", "send_digest.ran"] {
        assert_eq!(h.marks(marker).len(), 1, "{marker} ran once in Python");
    }

    // The history, as the Python SDK recorded it: kind, target, args and idempotency of each
    // step, in the order proposed.
    let history = h.kernel.history(&id).expect("a history");
    assert_eq!(History::from_json(&history.to_json()).unwrap(), history);
    let digest = json!({ "to": to, "subject": "Weekly digest", "items": found[..2] });
    let recorded: Vec<(&str, &str, Option<&Value>, &str, &str)> = history
        .steps()
        .iter()
        .map(|s| {
            (
                s.kind.as_str(),
                s.target.as_str(),
                s.args.as_ref(),
                s.idempotency.as_str(),
                s.status.as_str(),
            )
        })
        .collect();
    let search_args = json!({ "query": REPLAY_QUERY, "limit": 3, "min_score": 0.25 });
    let pick_args = json!({ "found": found });
    let no_args = json!({});
    assert_eq!(
        recorded,
        [
            (
                "tool_call",
                "search",
                Some(&search_args),
                "safe_to_retry",
                "succeeded"
            ),
            (
                "local",
                "pick",
                Some(&pick_args),
                "safe_to_retry",
                "succeeded"
            ),
            (
                "local",
                "batch",
                Some(&no_args),
                "safe_to_retry",
                "succeeded"
            ),
            (
                "tool_call",
                "send_digest",
                Some(&digest),
                "at_most_once",
                "succeeded"
            ),
        ],
        "{history:#?}"
    );

    // The Rust twin replays it: the same four step ids, nothing run, the same output.
    let runs = TwinRuns::default();
    let report = replay::check(rust_replay_twin(&runs, "Weekly digest"), &history)
        .await
        .expect("check");
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.asked.len(), 4, "{report}");
    for (asked, step) in report.asked.iter().zip(history.steps()) {
        assert_eq!(asked.verdict, Verdict::Replayed, "{report}");
        assert_eq!(asked.step_id, step.step_id, "{report}");
        assert_eq!(
            (asked.kind.as_str(), asked.target.as_str(), &asked.args),
            (
                step.kind.as_str(),
                step.target.as_str(),
                step.args.as_ref().unwrap()
            ),
        );
        assert_eq!(asked.idempotency, step.idempotency, "{}", step.target);
    }
    assert!(report.unreached.is_empty(), "{report}");
    assert_eq!(report.ending, Ending::Completed(output));
    assert!(
        report
            .to_string()
            .contains("4 of 4 recorded steps replayed"),
        "{report}"
    );
    assert_eq!(runs.total(), 0, "a replay check runs no body");

    // A twin that changed the digest's subject parts from it at step 4, before the send.
    let changed = replay::check(rust_replay_twin(&runs, "Your weekly digest"), &history)
        .await
        .expect("check");
    assert!(!changed.is_clean(), "{changed}");
    let (asked, expected) = changed.divergence().expect("a divergence");
    assert_eq!(
        (asked.position, asked.kind.as_str(), asked.target.as_str()),
        (4, "tool_call", "send_digest"),
        "{changed}"
    );
    assert_eq!(asked.idempotency, "at_most_once");
    assert_eq!(asked.verdict, Verdict::New);
    assert_eq!(asked.args["subject"], "Your weekly digest");
    let expected = expected.expect("the recorded step expected there");
    assert_eq!(expected.target, "send_digest");
    assert_eq!(expected.args.as_ref(), Some(&digest));
    assert!(
        changed.asked[..3]
            .iter()
            .all(|s| s.verdict == Verdict::Replayed),
        "{changed}"
    );
    assert_eq!(changed.dangerous_steps().count(), 1, "{changed}");
    assert_eq!(changed.unreached.len(), 1, "{changed}");
    assert_eq!(changed.ending, Ending::Stopped);
    // Both sides print with sorted keys, even here, where rig-core turns on serde_json's
    // `preserve_order` (the asked args were serialized in field order).
    let items = json!(found[..2]);
    let text = changed.to_string();
    assert!(
        text.contains(&format!(
            "step 4: the history has tool_call `send_digest` with \
             {{\"items\":{items},\"subject\":\"Weekly digest\",\"to\":\"{to}\"}} (at_most_once); \
             this code asked for tool_call `send_digest` with \
             {{\"items\":{items},\"subject\":\"Your weekly digest\",\"to\":\"{to}\"}} (at_most_once), \
             which would run live"
        )),
        "{text}"
    );
    assert!(
        text.contains("at_most_once: would take effect again"),
        "{text}"
    );
    assert!(
        text.contains("never reached: tool_call `send_digest`"),
        "{text}"
    );
    assert_eq!(runs.total(), 0, "neither check ran a body");
    assert_eq!(h.marks("send_digest.ran").len(), 1, "nor a Python one");
}
