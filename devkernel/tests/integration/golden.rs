//! Golden test of the event log's wire format: every event kind the dev kernel emits, with
//! its payload variants, read as raw bytes from `GET /v0/executions/{id}/events` and compared
//! with `tests/golden/events.txt` (key order included: nothing is round-tripped through
//! `serde_json::Value`).
//!
//! Only what is nondeterministic is normalized, per scenario and by first appearance: UUIDs
//! (`<uuid-N>`), step ids, which hash the execution id (`<step-N>`, only as the value of a
//! `"step_id"` key) and timestamps (`<ts>`). Policy hashes hash the bundle text and stay.
//!
//! Each scenario has its own kernel and fake agent (the scenarios run concurrently), drives it
//! with signed agent requests and client requests over HTTP, and waits for states by polling
//! the API; `DevKernel::redeliver` stands in for an agent crash. After every delivery the
//! test waits for its `dispatch.acked` before the agent's next request, so the ack's place in
//! the log is fixed.
//!
//! Re-bless after an intended change of the wire format:
//! `REBUNO_BLESS=1 cargo test -p rebuno-devkernel --test integration golden`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use axum::http::StatusCode;
use common::{FakeAgent, Run, SECRET, client, kernel_with_agent};
use rebuno_devkernel::{AgentSpec, DevKernel};
use regex::{Captures, Regex};
use serde_json::value::RawValue;
use serde_json::{Value, json};

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/events.txt");

/// Every event kind the scenarios must produce between them.
///
/// Not listed: `dispatch.discarded` (`kernel/delivery/claim.rs`, a pending or failed dispatch of a
/// terminal execution). Every terminal transition goes through `Kernel::finish`, which
/// retires all dispatches under the same lock, and nothing makes a dispatch pending or failed
/// again once the execution is terminal, so no request sequence reaches it. Nor
/// `resource.reconfigured`: a re-registration keeps the first policy (Go:
/// TestRepeatedRegistrationKeepsItsPolicyAndRefusesAnotherDriverOrCapability), so it is only
/// read back from logs written before.
const KINDS: &[&str] = &[
    "approval.denied",
    "approval.expired",
    "approval.granted",
    "approval.requested",
    "dispatch.acked",
    "dispatch.failed",
    "dispatch.queued",
    "dispatch.reclaimed",
    "execution.blocked",
    "execution.cancelled",
    "execution.completed",
    "execution.created",
    "execution.failed",
    "execution.forked",
    "execution.resumed",
    "execution.started",
    "resource.bound",
    "resource.checkpoint_failed",
    "resource.checkpointed",
    "resource.initialized",
    "resource.registered",
    "step.allowed",
    "step.awaiting_approval",
    "step.cancelled",
    "step.denied",
    "step.executing",
    "step.failed",
    "step.proposed",
    "step.rate_limited",
    "step.succeeded",
];

/// How long any awaited state may take.
const WAIT: Duration = Duration::from_secs(10);

/// The raw logs of one scenario's executions.
struct Section {
    name: &'static str,
    logs: Vec<(&'static str, Vec<String>)>,
}

type Scenario = Pin<Box<dyn Future<Output = Section>>>;

#[tokio::test]
async fn event_wire_format_matches_golden() {
    let started = std::time::Instant::now();
    let scenarios: Vec<Scenario> = vec![
        Box::pin(lifecycle()),
        Box::pin(indeterminate()),
        Box::pin(policy()),
        Box::pin(approvals()),
        Box::pin(rate_limits()),
        Box::pin(dispatch_exhausted()),
        Box::pin(lease_expiry()),
        Box::pin(sessions()),
        Box::pin(subagents()),
        Box::pin(resources_and_forks()),
    ];
    let sections = futures_util::future::join_all(scenarios).await;

    let mut kinds = BTreeSet::new();
    let mut text = String::from(
        "# Event logs of the dev kernel, one event per line as GET /v0/executions/{id}/events\n\
         # returns it, with UUIDs, step ids and timestamps normalized. Written by\n\
         # devkernel/tests/integration/golden.rs; re-bless with\n\
         # REBUNO_BLESS=1 cargo test -p rebuno-devkernel --test integration golden\n",
    );
    for section in &sections {
        let mut normalizer = Normalizer::new();
        text.push_str(&format!("\n=== {}\n", section.name));
        for (label, events) in &section.logs {
            text.push_str(&format!("--- {label}\n"));
            for event in events {
                let head: Value = serde_json::from_str(event).unwrap();
                kinds.insert(head["type"].as_str().unwrap().to_owned());
                text.push_str(&normalizer.apply(event));
                text.push('\n');
            }
        }
    }

    let expected: BTreeSet<String> = KINDS.iter().map(|k| (*k).to_owned()).collect();
    let every: BTreeSet<String> = rebuno_devkernel::EventKind::ALL
        .iter()
        .map(|k| k.as_str().to_owned())
        .filter(|k| k != "dispatch.discarded" && k != "resource.reconfigured")
        .collect();
    assert_eq!(
        expected, every,
        "KINDS must list every EventKind but dispatch.discarded and resource.reconfigured"
    );
    let missing: Vec<&String> = expected.difference(&kinds).collect();
    let unlisted: Vec<&String> = kinds.difference(&expected).collect();
    assert!(
        missing.is_empty() && unlisted.is_empty(),
        "event kinds differ from KINDS: not produced by any scenario {missing:?}, \
         produced but not listed {unlisted:?}"
    );

    if std::env::var_os("REBUNO_BLESS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(std::path::Path::new(GOLDEN).parent().unwrap()).unwrap();
        std::fs::write(GOLDEN, &text).unwrap();
        eprintln!("blessed {GOLDEN}");
    } else {
        let golden = std::fs::read_to_string(GOLDEN).unwrap_or_else(|e| {
            panic!("cannot read {GOLDEN} ({e}); create it with REBUNO_BLESS=1")
        });
        compare(&golden, &text);
    }
    eprintln!("golden scenarios took {:?}", started.elapsed());
}

/// Fails with the first differing line and some context.
fn compare(golden: &str, actual: &str) {
    if golden == actual {
        return;
    }
    let (want, got): (Vec<&str>, Vec<&str>) = (golden.lines().collect(), actual.lines().collect());
    let line = want
        .iter()
        .zip(&got)
        .position(|(a, b)| a != b)
        .unwrap_or(want.len().min(got.len()));
    let scenario = want[..line.min(want.len())]
        .iter()
        .rev()
        .find(|l| l.starts_with("=== "))
        .copied()
        .unwrap_or("(header)");
    let context = |lines: &[&str]| {
        lines
            .iter()
            .enumerate()
            .skip(line.saturating_sub(2))
            .take(5)
            .map(|(i, l)| format!("{:5} {l}", i + 1))
            .collect::<Vec<_>>()
            .join("\n")
    };
    panic!(
        "event logs differ from {GOLDEN} at line {} (in {scenario}); {} golden lines, {} actual\n\
         golden:\n{}\nactual:\n{}\n\
         If the change is intended, re-bless with REBUNO_BLESS=1.",
        line + 1,
        want.len(),
        got.len(),
        context(&want),
        context(&got),
    );
}

/// Replaces UUIDs, step ids and timestamps by first appearance.
struct Normalizer {
    pattern: Regex,
    uuids: HashMap<String, usize>,
    steps: HashMap<String, usize>,
}

impl Normalizer {
    fn new() -> Self {
        let pattern = Regex::new(concat!(
            r#""step_id":"(?P<step>[0-9a-f]{64})""#,
            r"|(?P<uuid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})",
            r"|(?P<ts>[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?Z)",
        ))
        .unwrap();
        Self {
            pattern,
            uuids: HashMap::new(),
            steps: HashMap::new(),
        }
    }

    fn apply(&mut self, text: &str) -> String {
        let Self {
            pattern,
            uuids,
            steps,
        } = self;
        pattern
            .replace_all(text, |caps: &Captures<'_>| {
                if let Some(step) = caps.name("step") {
                    let next = steps.len() + 1;
                    let n = *steps.entry(step.as_str().to_owned()).or_insert(next);
                    format!(r#""step_id":"<step-{n}>""#)
                } else if let Some(uuid) = caps.name("uuid") {
                    let next = uuids.len() + 1;
                    let n = *uuids.entry(uuid.as_str().to_owned()).or_insert(next);
                    format!("<uuid-{n}>")
                } else {
                    "<ts>".to_owned()
                }
            })
            .into_owned()
    }
}

// ---------------------------------------------------------------------------------------------
// Driving the kernel.

/// The raw events of `id`, one string per event, exactly as the API returned them.
async fn raw_events(kernel: &DevKernel, id: &str) -> Vec<String> {
    let url = format!("{}/v0/executions/{id}/events?limit=1000", kernel.url());
    let response = reqwest::Client::new().get(url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    let events: Vec<&RawValue> = serde_json::from_str(&body).unwrap();
    let events: Vec<String> = events.iter().map(|e| e.get().to_owned()).collect();
    assert!(events.len() < 1000, "page the log");
    assert_eq!(
        format!("[{}]", events.join(",")),
        body,
        "the events response is a compact array"
    );
    events
}

/// The log of `id` as JSON (for waiting on states).
async fn events(kernel: &DevKernel, id: &str) -> Vec<Value> {
    raw_events(kernel, id)
        .await
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect()
}

/// Polls the log of `id` until `done` holds.
async fn wait_for(kernel: &DevKernel, id: &str, what: &str, done: impl Fn(&[Value]) -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if done(&events(kernel, id).await) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether the log has an event of `kind`.
fn has(events: &[Value], kind: &str) -> bool {
    events.iter().any(|e| e["type"] == kind)
}

/// Waits for the next delivery (of `id`) and for its `dispatch.acked`, so the ack's place in
/// the log does not race the agent's next request.
async fn deliver(kernel: &DevKernel, agent: &mut FakeAgent, id: &str) -> Run {
    let run = Run::attach(kernel, agent, id).await;
    let (dispatch, attempt) = (run.dispatch.clone(), run.attempt);
    wait_for(kernel, id, "dispatch.acked", |events| {
        events.iter().any(|e| {
            e["type"] == "dispatch.acked"
                && e["payload"]["dispatch_id"] == dispatch.as_str()
                && e["payload"]["attempt"] == attempt
        })
    })
    .await;
    run
}

/// Creates an execution over HTTP and returns its id (`201` asserted).
async fn create(kernel: &DevKernel, body: Value) -> String {
    let (status, created) = client(
        "POST",
        &format!("{}/v0/executions", kernel.url()),
        None,
        Some(&body.to_string()),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    created["id"].as_str().unwrap().to_owned()
}

/// Creates an execution of `hello` over HTTP and waits for its acked first delivery.
async fn start(kernel: &DevKernel, agent: &mut FakeAgent, body: Value) -> Run {
    let id = create(kernel, body).await;
    deliver(kernel, agent, &id).await
}

/// A client POST expecting `status`; returns the body.
async fn post(kernel: &DevKernel, path: &str, body: Option<Value>, status: u16) -> Value {
    let body = body.map(|b| b.to_string());
    let (got, response) = client(
        "POST",
        &format!("{}{path}", kernel.url()),
        None,
        body.as_deref(),
    )
    .await;
    assert_eq!(got, status, "POST {path}: {response}");
    response
}

/// A kernel whose `hello` agent has `policy` (set over HTTP).
async fn kernel_with_policy(policy: &str) -> (DevKernel, FakeAgent) {
    let (kernel, agent) = kernel_with_agent().await;
    post(
        &kernel,
        "/v0/policies/hello",
        Some(json!({"bundle": policy})),
        204,
    )
    .await;
    (kernel, agent)
}

fn tool(target: &str, args: Value) -> Value {
    json!({"kind": "tool_call", "target": target, "args": args, "idempotency": "safe_to_retry", "resources": []})
}

fn tool_on(target: &str, resources: &[&str]) -> Value {
    json!({"kind": "tool_call", "target": target, "args": {"t": target}, "resources": resources})
}

fn llm(n: u32) -> Value {
    json!({"kind": "llm_call", "target": "gpt", "args": {"n": n}})
}

fn step_id(decision: &Value) -> String {
    decision["step_id"].as_str().unwrap().to_owned()
}

/// Submits and asserts the decision.
async fn submit(run: &Run, body: Value, decision: &str) -> Value {
    let got = run.submit(body).await;
    assert_eq!(got["decision"], decision, "{got}");
    got
}

/// Submits, then completes the step with `outcome`.
async fn submit_complete(run: &Run, body: Value, outcome: Value) -> String {
    let step = step_id(&submit(run, body, "proceed").await);
    let recorded = run.complete(&step, outcome).await;
    assert_eq!(recorded, json!({"decision": "recorded"}));
    step
}

/// Submits, then fails the step with `outcome`.
async fn submit_fail(run: &Run, body: Value, outcome: &str) {
    let step = step_id(&submit(run, body, "proceed").await);
    let (status, recorded) = run.post(&format!("/steps/{step}/fail"), outcome).await;
    assert_eq!((status, recorded), (200, json!({"decision": "recorded"})));
}

/// An agent-side POST expecting `204`.
async fn done(run: &Run, path: &str, body: &str) {
    let (status, response) = run.post(path, body).await;
    assert_eq!(status, 204, "{path}: {response}");
}

/// The raw logs of `executions`, after checking no delivery is left unaccounted for.
async fn finish(
    name: &'static str,
    kernel: DevKernel,
    agent: &mut FakeAgent,
    executions: &[(&'static str, String)],
) -> Section {
    if let Ok(extra) = agent.rx.try_recv() {
        panic!("{name}: unexpected delivery {}", extra.raw);
    }
    let mut logs = Vec::new();
    for (label, id) in executions {
        logs.push((*label, raw_events(&kernel, id).await));
    }
    kernel.shutdown().await;
    Section { name, logs }
}

// ---------------------------------------------------------------------------------------------
// Scenarios.

/// No policy: tool and LLM steps that succeed (with and without usage) and fail (with and
/// without an error), completion with and without output, failure with an empty reason.
async fn lifecycle() -> Section {
    let (kernel, mut agent) = kernel_with_agent().await;
    let run = start(
        &kernel,
        &mut agent,
        json!({"agent_id": "hello", "input": {"q": "rust"}}),
    )
    .await;
    submit_complete(
        &run,
        tool("search", json!({"query": "rust"})),
        json!({"result": ["r1", "r2"]}),
    )
    .await;
    submit_complete(
        &run,
        llm(1),
        json!({"result": {"usage": {"input_tokens": 7, "output_tokens": 5}}}),
    )
    .await;
    submit_complete(&run, llm(2), json!({"result": {"text": "no usage"}})).await;
    submit_fail(
        &run,
        tool("fetch", json!({"url": "x"})),
        r#"{"error": {"message": "boom"}}"#,
    )
    .await;
    submit_fail(
        &run,
        tool("fetch", json!({"url": "y"})),
        r#"{"error": null}"#,
    )
    .await;
    let (status, _) = run.post("/heartbeat", "").await;
    assert_eq!(status, 204);
    done(&run, "/complete", r#"{"output": {"answer": "done"}}"#).await;

    let bare = start(&kernel, &mut agent, json!({"agent_id": "hello"})).await;
    done(&bare, "/complete", "{}").await;

    let failed = start(
        &kernel,
        &mut agent,
        json!({"agent_id": "hello", "input": 3}),
    )
    .await;
    done(&failed, "/fail", "{}").await;

    finish(
        "lifecycle",
        kernel,
        &mut agent,
        &[
            ("steps, then completed with output", run.id),
            ("completed without output", bare.id),
            ("failed with an empty reason", failed.id),
        ],
    )
    .await
}

/// A crash while an `at_most_once` step runs: the re-delivered attempt gets the step failed
/// `indeterminate`, a fresh try is denied, and the agent fails the execution.
async fn indeterminate() -> Section {
    let (kernel, mut agent) = kernel_with_agent().await;
    let run = start(
        &kernel,
        &mut agent,
        json!({"agent_id": "hello", "input": {}}),
    )
    .await;
    let pay = json!({"kind": "tool_call", "target": "pay", "args": {"n": 1}, "idempotency": "at_most_once"});
    submit(&run, pay.clone(), "proceed").await;
    assert_eq!(kernel.redeliver(&run.id).unwrap(), 2);
    let again = deliver(&kernel, &mut agent, &run.id).await;
    let replay = submit(&again, pay.clone(), "replay").await;
    assert_eq!(replay["error"]["reason"], "indeterminate");
    let denied = submit(&again, pay, "denied").await;
    assert_eq!(denied["rule_id"], "__indeterminate_retry");
    done(&again, "/fail", r#"{"error": "agent_error: boom"}"#).await;
    finish(
        "indeterminate",
        kernel,
        &mut agent,
        &[("redelivered, failed by the agent", run.id)],
    )
    .await
}

const POLICY: &str = r#"default_action: allow
rules:
  - id: no-rm
    when: { step_kind: tool_call, target: "rm*" }
    then: { decision: deny, reason: destructive }
  - id: no-drop
    when: { target: drop_table }
    then: { decision: deny }
  - id: allow-search
    when: { target: search }
    then: { decision: allow }
  - id: llm-budget
    when: { step_kind: llm_call }
    then: { decision: allow, budget: { max_tokens: 10 } }
"#;

/// Policy verdicts: denials with and without a reason, allows by rule, by default and for a
/// local step, and a spent token budget.
async fn policy() -> Section {
    let (kernel, mut agent) = kernel_with_policy(POLICY).await;
    let run = start(
        &kernel,
        &mut agent,
        json!({"agent_id": "hello", "input": {}}),
    )
    .await;
    let denied = submit(&run, tool("rm_rf", json!({"path": "/"})), "denied").await;
    assert_eq!(denied["reason"], "destructive");
    let denied = submit(&run, tool("drop_table", json!({})), "denied").await;
    assert_eq!(denied["reason"], "policy_denied");
    submit_complete(&run, tool("search", json!({})), json!({"result": 1})).await;
    submit_complete(&run, tool("lookup", json!({})), json!({"result": 2})).await;
    submit_complete(
        &run,
        json!({"kind": "local", "target": "format", "args": {}}),
        json!({"result": "ok"}),
    )
    .await;
    submit_complete(
        &run,
        llm(1),
        json!({"result": {"usage": {"prompt_tokens": 7, "completion_tokens": 5}}}),
    )
    .await;
    let spent = submit(&run, llm(2), "denied").await;
    assert_eq!(spent["reason"], "execution_token_budget_exceeded");
    done(&run, "/complete", r#"{"output": null}"#).await;
    finish("policy", kernel, &mut agent, &[("policy verdicts", run.id)]).await
}

const APPROVALS: &str = r#"default_action: allow
rules:
  - id: gate-email
    when: { target: send_email }
    then:
      decision: require_approval
      reason: check recipients
      approval_config: { approvers: [alice], message: check the recipient }
  - id: gate-fast
    when: { target: transfer }
    then: { decision: require_approval, approval_config: { timeout: 300ms } }
  - id: llm-budget
    when: { step_kind: llm_call }
    then: { decision: allow, budget: { max_tokens: 10, on_exceed: require_approval } }
"#;

/// Submits a gated step and returns the approval id.
async fn gated(kernel: &DevKernel, run: &Run, body: Value) -> String {
    let blocked = submit(run, body, "blocked").await;
    wait_for(kernel, &run.id, "execution.blocked", |e| {
        has(e, "execution.blocked")
    })
    .await;
    blocked["approval_id"].as_str().unwrap().to_owned()
}

/// Approvals granted (with and without a decider), denied (with and without a rationale),
/// expired by the clock and by a cancel; a budget that asks for approval.
async fn approvals() -> Section {
    let (kernel, mut agent) = kernel_with_policy(APPROVALS).await;
    let email = |to: &str| tool("send_email", json!({"to": to}));

    let run = start(
        &kernel,
        &mut agent,
        json!({"agent_id": "hello", "input": {}}),
    )
    .await;
    let approval = gated(&kernel, &run, email("a@example.com")).await;
    post(
        &kernel,
        &format!("/v0/approvals/{approval}/grant"),
        Some(json!({"decided_by": "alice", "rationale": "fine"})),
        204,
    )
    .await;
    let run = deliver(&kernel, &mut agent, &run.id).await;
    submit_complete(&run, email("a@example.com"), json!({"result": "sent"})).await;

    let approval = gated(&kernel, &run, email("b@example.com")).await;
    post(
        &kernel,
        &format!("/v0/approvals/{approval}/deny"),
        Some(json!({"decided_by": "alice"})),
        204,
    )
    .await;
    let run = deliver(&kernel, &mut agent, &run.id).await;
    assert_eq!(
        submit(&run, email("b@example.com"), "denied").await["reason"],
        "approval_denied"
    );

    let approval = gated(&kernel, &run, email("c@example.com")).await;
    post(
        &kernel,
        &format!("/v0/approvals/{approval}/deny"),
        Some(json!({"decided_by": "alice", "rationale": "too risky"})),
        204,
    )
    .await;
    let run = deliver(&kernel, &mut agent, &run.id).await;

    submit_complete(
        &run,
        llm(1),
        json!({"result": {"usage": {"input_tokens": 8, "output_tokens": 4}}}),
    )
    .await;
    let approval = gated(&kernel, &run, llm(2)).await;
    post(
        &kernel,
        &format!("/v0/approvals/{approval}/grant"),
        None,
        204,
    )
    .await;
    let run = deliver(&kernel, &mut agent, &run.id).await;
    done(&run, "/complete", r#"{"output": "ok"}"#).await;

    let timed = start(
        &kernel,
        &mut agent,
        json!({"agent_id": "hello", "input": {}}),
    )
    .await;
    gated(&kernel, &timed, tool("transfer", json!({"amount": 5}))).await;
    wait_for(&kernel, &timed.id, "approval.expired", |e| {
        has(e, "approval.expired")
    })
    .await;
    let timed = deliver(&kernel, &mut agent, &timed.id).await;
    assert_eq!(
        submit(&timed, tool("transfer", json!({"amount": 5})), "denied").await["reason"],
        "approval_timeout"
    );
    done(&timed, "/complete", r#"{"output": "late"}"#).await;

    let cancelled = start(
        &kernel,
        &mut agent,
        json!({"agent_id": "hello", "input": {}}),
    )
    .await;
    submit(&cancelled, tool("search", json!({})), "proceed").await;
    gated(&kernel, &cancelled, email("d@example.com")).await;
    post(
        &kernel,
        &format!("/v0/executions/{}/cancel", cancelled.id),
        None,
        204,
    )
    .await;

    finish(
        "approvals",
        kernel,
        &mut agent,
        &[
            ("granted, denied twice, budget approval", run.id),
            ("approval expired by the clock", timed.id),
            ("cancelled while a step runs and one waits", cancelled.id),
        ],
    )
    .await
}

const RATE_LIMITS: &str = r#"default_action: allow
rules:
  - id: search-limit
    when: { target: search }
    then: { decision: allow, rate_limit: { max_calls: 1, window: 1m } }
  - id: fetch-park
    when: { target: fetch }
    then: { decision: allow, rate_limit: { max_calls: 1, window: 2s, max_wait: 10s } }
"#;

/// A rate limit that refuses, and one that parks the execution on a fresh dispatch.
async fn rate_limits() -> Section {
    let (kernel, mut agent) = kernel_with_policy(RATE_LIMITS).await;
    let run = start(
        &kernel,
        &mut agent,
        json!({"agent_id": "hello", "input": {}}),
    )
    .await;
    submit_complete(&run, tool("search", json!({"n": 1})), json!({"result": 1})).await;
    let refused = submit(&run, tool("search", json!({"n": 2})), "rate_limited").await;
    assert_eq!(refused["reason"], "rate_limit_exceeded");
    submit_complete(&run, tool("fetch", json!({"n": 1})), json!({"result": 1})).await;
    submit(&run, tool("fetch", json!({"n": 2})), "blocked").await;
    let run = deliver(&kernel, &mut agent, &run.id).await;
    submit_complete(&run, tool("fetch", json!({"n": 2})), json!({"result": 2})).await;
    done(&run, "/complete", r#"{"output": 2}"#).await;
    finish(
        "rate_limits",
        kernel,
        &mut agent,
        &[("refused, parked, resumed", run.id)],
    )
    .await
}

/// A webhook that always answers 500: every attempt fails, then the execution.
async fn dispatch_exhausted() -> Section {
    let mut agent = FakeAgent::start_with(StatusCode::INTERNAL_SERVER_ERROR).await;
    let kernel = DevKernel::builder()
        .max_attempts(3)
        .retry_backoff(Duration::from_millis(10), Duration::from_millis(40))
        .start()
        .await
        .unwrap();
    kernel
        .register_agent(AgentSpec::new("hello", &agent.url, SECRET))
        .unwrap();
    let id = create(&kernel, json!({"agent_id": "hello", "input": null})).await;
    wait_for(&kernel, &id, "execution.failed", |e| {
        has(e, "execution.failed")
    })
    .await;
    for attempt in 1..=3 {
        assert_eq!(agent.next().await.attempt, attempt);
    }
    finish(
        "dispatch_exhausted",
        kernel,
        &mut agent,
        &[("every delivery refused", id)],
    )
    .await
}

/// A manual clock runs a lease out: the reclaim is visible and the next attempt delivered;
/// a re-registration asking for another checkpoint interval writes nothing.
async fn lease_expiry() -> Section {
    let mut agent = FakeAgent::start().await;
    let kernel = DevKernel::builder().manual_clock().start().await.unwrap();
    kernel
        .register_agent(AgentSpec::new("hello", &agent.url, SECRET))
        .unwrap();
    let silent = start(
        &kernel,
        &mut agent,
        json!({"agent_id": "hello", "input": 1}),
    )
    .await;
    assert_eq!(silent.post("/resources", WORKSPACE).await.0, 200);
    let every_three = WORKSPACE.replace(r#""every_steps":1"#, r#""every_steps":3"#);
    assert_eq!(silent.post("/resources", &every_three).await.0, 200);
    assert_eq!(silent.post("/resources", &every_three).await.0, 200);
    kernel.advance(Duration::from_secs(121)).unwrap();
    let again = deliver(&kernel, &mut agent, &silent.id).await;
    assert_eq!(again.attempt, 2);
    done(&again, "/complete", r#"{"output":"late"}"#).await;
    finish(
        "lease_expiry",
        kernel,
        &mut agent,
        &[("a lease run out, reclaimed", silent.id)],
    )
    .await
}

const WORKSPACE: &str = r#"{"key":"workspace","driver_id":"fs","configuration":{"root":"/w","b":1},"coverage_reuse":true,"every_steps":1}"#;

/// Session turns: the second waits, then starts from the first and inherits its resources;
/// an explicit parent outside any session inherits nothing (Go:
/// TestSessionResourceBindingsStayWithinTheirAgentAndSession).
async fn sessions() -> Section {
    let (kernel, mut agent) = kernel_with_agent().await;
    let first = start(
        &kernel,
        &mut agent,
        json!({"agent_id": "hello", "input": 1, "session": "chat:1"}),
    )
    .await;
    let (status, _) = first.post("/resources", WORKSPACE).await;
    assert_eq!(status, 200);
    done(
        &first,
        "/resources/workspace/binding",
        r#"{"binding": {"dir": "/w"}}"#,
    )
    .await;
    let second = create(
        &kernel,
        json!({"agent_id": "hello", "input": 2, "session": "chat:1"}),
    )
    .await;
    done(
        &first,
        "/complete",
        r#"{"output": {"turn": 1}, "state": {"count": 1}}"#,
    )
    .await;
    let second = deliver(&kernel, &mut agent, &second).await;
    done(&second, "/complete", r#"{"output": {"turn": 2}}"#).await;

    let child = start(
        &kernel,
        &mut agent,
        json!({"agent_id": "hello", "input": 3, "parent_execution_id": first.id}),
    )
    .await;
    done(&child, "/complete", r#"{"output": {"turn": 3}}"#).await;
    finish(
        "sessions",
        kernel,
        &mut agent,
        &[
            ("first turn", first.id),
            ("second turn, created while the first ran", second.id),
            ("explicit parent", child.id),
        ],
    )
    .await
}

/// Subagents: one completes while the parent is suspended, one fails, one is cancelled by a
/// client, one is still running (with a step) when the parent fails.
async fn subagents() -> Section {
    let (kernel, mut agent) = kernel_with_agent().await;
    let parent = start(
        &kernel,
        &mut agent,
        json!({"agent_id": "hello", "input": {}}),
    )
    .await;
    let spawn = |step: &str, n: u32| json!({"agent_id": "hello", "input": {"n": n}, "spawned_by": {"execution_id": parent.id, "step_id": step}});

    let step = step_id(&submit(&parent, tool("delegate", json!({"n": 1})), "proceed").await);
    let first = start(&kernel, &mut agent, spawn(&step, 1)).await;
    let (status, suspended) = parent.post("/suspend", "").await;
    assert_eq!((status, suspended), (200, json!({"suspended": true})));
    done(&first, "/complete", r#"{"output": {"answer": 42}}"#).await;
    let parent = deliver(&kernel, &mut agent, &parent.id).await;

    let step = step_id(&submit(&parent, tool("delegate", json!({"n": 2})), "proceed").await);
    let second = start(&kernel, &mut agent, spawn(&step, 2)).await;
    done(&second, "/fail", r#"{"error": "child_error"}"#).await;

    let step = step_id(&submit(&parent, tool("delegate", json!({"n": 3})), "proceed").await);
    let third = start(&kernel, &mut agent, spawn(&step, 3)).await;
    post(
        &kernel,
        &format!("/v0/executions/{}/cancel", third.id),
        None,
        204,
    )
    .await;

    let step = step_id(&submit(&parent, tool("delegate", json!({"n": 4})), "proceed").await);
    let fourth = start(&kernel, &mut agent, spawn(&step, 4)).await;
    submit(&fourth, tool("work", json!({})), "proceed").await;
    done(&parent, "/fail", r#"{"error": "agent_error: boom"}"#).await;
    wait_for(&kernel, &fourth.id, "execution.cancelled", |e| {
        has(e, "execution.cancelled")
    })
    .await;

    finish(
        "subagents",
        kernel,
        &mut agent,
        &[
            ("parent", parent.id),
            ("completed child", first.id),
            ("failed child", second.id),
            ("child cancelled by a client", third.id),
            ("child cancelled with its parent", fourth.id),
        ],
    )
    .await
}

/// Fork POST over HTTP (`201` asserted); returns the fork's id.
async fn fork(kernel: &DevKernel, source: &str, body: Value) -> String {
    let forked = post(
        kernel,
        &format!("/v0/executions/{source}/fork"),
        Some(body),
        201,
    )
    .await;
    forked["id"].as_str().unwrap().to_owned()
}

/// The seq of the newest event of `id`.
async fn latest_seq(kernel: &DevKernel, id: &str) -> u64 {
    events(kernel, id).await.last().unwrap()["event_seq"]
        .as_u64()
        .unwrap()
}

/// Resources (registration, binding, captures accepted and refused, generations on tool and
/// LLM steps), then forks with a covered restoration, an uncovered one with a policy override
/// in a session, and none; the source is cancelled with a step running.
async fn resources_and_forks() -> Section {
    let (kernel, mut agent) = kernel_with_agent().await;
    let run = start(
        &kernel,
        &mut agent,
        json!({"agent_id": "hello", "input": {"n": 1}}),
    )
    .await;
    assert_eq!(run.post("/resources", WORKSPACE).await.0, 200);
    let scratch = r#"{"key":"scratch","driver_id":"mem","coverage_reuse":false}"#;
    assert_eq!(run.post("/resources", scratch).await.0, 200);
    done(&run, "/resources/workspace/binding", r#"{"binding": "b"}"#).await;
    let baseline = json!({
        "captures": [
            {"key": "workspace", "generation": 0, "checkpoint_ref": "c0"},
            {"key": "ghost", "generation": 0, "checkpoint_ref": "g"},
            {"key": "scratch", "generation": 0, "checkpoint_ref": ""},
        ],
        "capture_failures": [
            {"key": "scratch", "generation": 0, "error": "disk full"},
            {"key": "scratch", "generation": 0},
        ],
    });
    done(&run, "/resources/checkpoints", &baseline.to_string()).await;
    submit_complete(
        &run,
        tool_on("a", &["workspace"]),
        json!({"result": "A", "captures": [{"key": "workspace", "generation": 1, "checkpoint_ref": "c1"}]}),
    )
    .await;
    submit_complete(
        &run,
        llm(1),
        json!({"result": {"usage": {"input_tokens": 3, "output_tokens": 2}}}),
    )
    .await;
    submit_complete(&run, tool_on("b", &[]), json!({"result": "B"})).await;
    let covered_at = latest_seq(&kernel, &run.id).await;
    let stale = json!({"captures": [
        {"key": "workspace", "generation": 1, "checkpoint_ref": "again"},
        {"key": "workspace", "generation": 7, "checkpoint_ref": "future"},
    ]});
    done(&run, "/resources/checkpoints", &stale.to_string()).await;
    submit(&run, tool_on("c", &["workspace"]), "proceed").await;
    let busy = json!({"captures": [{"key": "workspace", "generation": 2, "checkpoint_ref": "c2"}]});
    done(&run, "/resources/checkpoints", &busy.to_string()).await;
    let latest = latest_seq(&kernel, &run.id).await;

    let covered = fork(&kernel, &run.id, json!({"at_seq": covered_at})).await;
    let rerun = deliver(&kernel, &mut agent, &covered).await;
    let replay = submit(&rerun, tool_on("a", &["workspace"]), "replay").await;
    assert_eq!(replay["result"], "A");
    submit_complete(&rerun, tool_on("c", &["workspace"]), json!({"result": "C"})).await;
    done(&rerun, "/complete", r#"{"output": "forked"}"#).await;

    let overridden = fork(
        &kernel,
        &run.id,
        json!({"at_seq": latest, "session": "f2", "policy_bundle": "default_action: deny"}),
    )
    .await;
    let rerun = deliver(&kernel, &mut agent, &overridden).await;
    submit(&rerun, tool_on("d", &[]), "denied").await;

    let bare = fork(&kernel, &run.id, json!({"at_seq": 1})).await;
    deliver(&kernel, &mut agent, &bare).await;

    post(
        &kernel,
        &format!("/v0/executions/{}/cancel", run.id),
        None,
        204,
    )
    .await;
    finish(
        "resources_and_forks",
        kernel,
        &mut agent,
        &[
            ("source, cancelled with a step running", run.id),
            ("fork at a covered seq, rerun and completed", covered),
            (
                "fork at the latest seq, policy override, session",
                overridden,
            ),
            ("fork before any resource", bare),
        ],
    )
    .await
}
