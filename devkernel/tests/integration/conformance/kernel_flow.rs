//! Conformance: the Go kernel's execution, step, approval, lifecycle, budget, idempotency and
//! agent-policy tests (`internal/kernel/{kernel,execution,lifecycle,budget,idempotency,agent}_test.go`)
//! replayed as scenarios over the dev kernel's HTTP API.
//!
//! The Go tests call the kernel in-process and re-drive an execution with a test hook that
//! enqueues a fresh dispatch; here a re-drive is [`DevKernel::redeliver`] (the in-flight
//! dispatch delivered again with the next attempt), which restarts occurrence counting the
//! same way. Timeouts and deadlines run on a manual clock.

use std::time::Duration;

use crate::common::time::Timestamp;
use rebuno::wire::ExecutionStatus;
use rebuno_devkernel::{AgentSpec, DevKernel, DevKernelBuilder, EventKind, identity};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::common::{self, FakeAgent, Run, SECRET, client, event_types, events_of};

const WAIT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A kernel built by `builder` whose `hello` agent (the fake agent) has `policy`, if any.
async fn kernel_from(builder: DevKernelBuilder, policy: Option<&str>) -> (DevKernel, FakeAgent) {
    let agent = FakeAgent::start().await;
    let mut spec = AgentSpec::new("hello", &agent.url, SECRET);
    if let Some(yaml) = policy {
        spec = spec.policy_yaml(yaml);
    }
    let kernel = builder.agent(spec).start().await.unwrap();
    (kernel, agent)
}

/// A real-time kernel whose `hello` agent has `policy`.
async fn kernel_with_policy(policy: &str) -> (DevKernel, FakeAgent) {
    kernel_from(
        DevKernel::builder().approval_timeout(Duration::from_secs(3600)),
        Some(policy),
    )
    .await
}

/// A kernel on a manual clock whose `hello` agent has `policy`, if any.
async fn manual_kernel(policy: Option<&str>) -> (DevKernel, FakeAgent) {
    kernel_from(DevKernel::builder().manual_clock(), policy).await
}

/// Starts an execution of `hello` and waits for its first delivery.
async fn start(kernel: &DevKernel, agent: &mut FakeAgent) -> Run {
    Run::start(kernel, agent, r#"{"agent_id":"hello","input":{}}"#).await
}

/// Re-drives the execution (the in-flight dispatch is delivered again) and returns the run
/// under the new lease.
async fn redrive(kernel: &DevKernel, agent: &mut FakeAgent, run: &Run) -> Run {
    kernel.redeliver(&run.id).unwrap();
    Run::attach(kernel, agent, &run.id).await
}

fn tool(target: &str, args: Value) -> Value {
    json!({"kind": "tool_call", "target": target, "args": args})
}

/// The LLM request the Go tests submit (target `gpt-4`).
fn gpt_request() -> Value {
    json!({"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]})
}

fn llm_step() -> Value {
    json!({"kind": "llm_call", "target": "gpt-4", "args": gpt_request()})
}

/// The protocol's step id of `(kind, target, args)` at `occurrence` in execution `id`.
fn step_id_of(id: &str, kind: &str, target: &str, args: &Value, occurrence: u32) -> String {
    let hash = identity::args_hash(&serde_json::to_vec(args).unwrap()).unwrap();
    identity::step_id(id, kind, target, &hash, occurrence)
}

/// `POST /v0/executions` with `body`.
async fn create(kernel: &DevKernel, body: Value) -> (u16, Value) {
    client(
        "POST",
        &format!("{}/v0/executions", kernel.url()),
        None,
        Some(&body.to_string()),
    )
    .await
}

/// A client request to `{kernel}{path}`.
async fn call(kernel: &DevKernel, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let body = body.map(|b| b.to_string());
    client(
        method,
        &format!("{}{path}", kernel.url()),
        None,
        body.as_deref(),
    )
    .await
}

/// `POST /v0/executions/{id}/cancel`.
async fn cancel(kernel: &DevKernel, id: &str) -> (u16, Value) {
    call(kernel, "POST", &format!("/v0/executions/{id}/cancel"), None).await
}

/// `GET /v0/executions/{id}` as a client.
async fn execution(kernel: &DevKernel, id: &str) -> Value {
    let (status, body) = call(kernel, "GET", &format!("/v0/executions/{id}"), None).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// `GET /v0/approvals/{id}`.
async fn approval(kernel: &DevKernel, id: &str) -> Value {
    let (status, body) = call(kernel, "GET", &format!("/v0/approvals/{id}"), None).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// `POST /v0/approvals/{id}/{grant|deny}` with `body`.
async fn decide(kernel: &DevKernel, id: &str, verb: &str, body: Value) -> (u16, Value) {
    call(
        kernel,
        "POST",
        &format!("/v0/approvals/{id}/{verb}"),
        Some(body),
    )
    .await
}

/// The agent's signed read of one step.
async fn step(run: &Run, step_id: &str) -> Value {
    let target = format!("/v0/executions/{}/steps/{step_id}", run.id);
    let (status, body) = run.api.send("GET", &target, None, "").await;
    assert_eq!(status, 200, "{body}");
    body
}

/// The terminal step events of the log (`step.denied|failed|succeeded|cancelled`), in order.
fn terminal_step_events(kernel: &DevKernel, id: &str) -> Vec<String> {
    event_types(kernel, id)
        .into_iter()
        .filter(|t| {
            matches!(
                t.as_str(),
                "step.denied" | "step.failed" | "step.succeeded" | "step.cancelled"
            )
        })
        .collect()
}

/// `step_type` of the first event of `kind`.
fn step_type(kernel: &DevKernel, id: &str, kind: &str) -> Value {
    let events = events_of(kernel, id, kind);
    let event = events.first().unwrap_or_else(|| panic!("no {kind} event"));
    event.payload["step_type"].clone()
}

/// Asserts no delivery arrives within `ms` milliseconds.
async fn assert_no_delivery(agent: &mut FakeAgent, ms: u64) {
    let next = tokio::time::timeout(Duration::from_millis(ms), agent.rx.recv()).await;
    assert!(next.is_err(), "unexpected delivery: {next:?}");
}

// ---------------------------------------------------------------------------------------------
// internal/kernel/kernel_test.go
// ---------------------------------------------------------------------------------------------

/// Go: TestCreateExecution (internal/kernel/kernel_test.go)
#[tokio::test]
async fn create_starts_the_execution_with_created_started_and_queued() {
    let (kernel, mut agent) = common::kernel_with_agent().await;
    let (status, created) = create(
        &kernel,
        json!({"agent_id": "hello", "input": {"msg": "hi"}}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["status"], "running");
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(execution(&kernel, &id).await["agent_id"], "hello");

    // The delivery's ack is the only event the Go test (which runs no dispatcher) leaves out.
    agent.next().await;
    kernel
        .wait_for_event(&id, EventKind::DispatchAcked, WAIT)
        .await
        .unwrap();
    let types: Vec<String> = event_types(&kernel, &id)
        .into_iter()
        .filter(|t| t != "dispatch.acked")
        .collect();
    assert_eq!(
        types,
        ["execution.created", "execution.started", "dispatch.queued"]
    );
    kernel.shutdown().await;
}

/// Go: TestSubmitAndReplayToolStep (internal/kernel/kernel_test.go)
#[tokio::test]
async fn a_completed_tool_step_replays_its_result_after_a_redrive() {
    let (kernel, mut agent) = common::kernel_with_agent().await;
    let run = start(&kernel, &mut agent).await;
    let args = json!({"path": "/tmp"});
    let step_id = step_id_of(&run.id, "tool_call", "read", &args, 0);

    let first = run.submit(tool("read", args.clone())).await;
    assert_eq!(first["decision"], "proceed");
    assert_eq!(first["step_id"], step_id);
    let recorded = run
        .complete(&step_id, json!({"result": {"ok": true}}))
        .await;
    assert_eq!(recorded["decision"], "recorded");

    let run = redrive(&kernel, &mut agent, &run).await;
    let again = run.submit(tool("read", args)).await;
    assert_eq!(again["decision"], "replay");
    assert_eq!(again["step_id"], step_id);
    assert_eq!(again["result"], json!({"ok": true}));
    kernel.shutdown().await;
}

/// Go: TestSubmitRejectsForeignDispatch (internal/kernel/kernel_test.go)
#[tokio::test]
async fn a_submit_under_a_foreign_unknown_or_missing_lease_is_refused() {
    let (kernel, mut agent) = common::kernel_with_agent().await;
    let run = start(&kernel, &mut agent).await;
    let other = start(&kernel, &mut agent).await;
    let target = format!("/v0/executions/{}/steps", run.id);
    let body = tool("read", json!({"path": "/tmp"})).to_string();

    // The other execution's live lease.
    let (status, refused) = run
        .api
        .send(
            "POST",
            &target,
            Some((&other.dispatch, other.attempt)),
            &body,
        )
        .await;
    assert_eq!(
        (status, refused["code"].as_str()),
        (409, Some("lease_superseded"))
    );

    // A dispatch nobody issued.
    let unknown = Uuid::now_v7().to_string();
    let (status, refused) = run
        .api
        .send("POST", &target, Some((&unknown, 1)), &body)
        .await;
    assert_eq!(
        (status, refused["code"].as_str()),
        (409, Some("lease_superseded"))
    );

    // No lease at all.
    let (status, refused) = run.api.send("POST", &target, None, &body).await;
    assert_eq!(
        (status, refused["code"].as_str()),
        (400, Some("validation_error"))
    );
    assert!(kernel.steps(&run.id).is_empty());
    kernel.shutdown().await;
}

/// Go: TestOccurrenceIsScopedToDispatch (internal/kernel/kernel_test.go)
#[tokio::test]
async fn identical_calls_get_new_steps_within_a_dispatch_and_replay_after_a_redrive() {
    let (kernel, mut agent) = common::kernel_with_agent().await;
    let run = start(&kernel, &mut agent).await;
    let call = tool("read", json!({"path": "/tmp"}));

    let first = run.submit(call.clone()).await;
    let first_id = first["step_id"].as_str().unwrap().to_owned();
    run.complete(&first_id, json!({"result": {"n": 1}})).await;

    let second = run.submit(call.clone()).await;
    assert_eq!(second["decision"], "proceed");
    assert_ne!(second["step_id"], first["step_id"]);

    let run = redrive(&kernel, &mut agent, &run).await;
    let resumed = run.submit(call).await;
    assert_eq!(resumed["decision"], "replay");
    assert_eq!(resumed["step_id"], first_id.as_str());
    assert_eq!(resumed["result"], json!({"n": 1}));
    kernel.shutdown().await;
}

/// Go: TestPolicyDeny (internal/kernel/kernel_test.go)
#[tokio::test]
async fn a_policy_denial_writes_one_terminal_step_event() {
    let (kernel, mut agent) = kernel_with_policy("default_action: deny\n").await;
    let run = start(&kernel, &mut agent).await;
    let args = json!({"path": "/tmp"});
    let step_id = step_id_of(&run.id, "tool_call", "read", &args, 0);

    let denied = run.submit(tool("read", args)).await;
    assert_eq!(denied["decision"], "denied");
    assert_eq!(denied["step_id"], step_id);
    assert_eq!(step_type(&kernel, &run.id, "step.denied"), "tool_call");
    assert_eq!(terminal_step_events(&kernel, &run.id), ["step.denied"]);
    assert_eq!(step(&run, &step_id).await["status"], "denied");
    kernel.shutdown().await;
}

const APPROVE_WRITE: &str = r"
rules:
  - id: approve-write
    when: { target: write }
    then:
      decision: require_approval
      approval_config: { timeout: 1h, message: approve write }
";

/// Go: TestApprovalFlow (internal/kernel/kernel_test.go)
#[tokio::test]
async fn a_gated_step_blocks_the_execution_and_proceeds_once_granted() {
    let (kernel, mut agent) = kernel_with_policy(APPROVE_WRITE).await;
    let run = start(&kernel, &mut agent).await;
    let call = tool("write", json!({"path": "/tmp"}));

    let blocked = run.submit(call.clone()).await;
    assert_eq!(blocked["decision"], "blocked");
    let approval_id = blocked["approval_id"].as_str().unwrap().to_owned();
    assert_eq!(execution(&kernel, &run.id).await["status"], "blocked");

    let (status, body) = decide(
        &kernel,
        &approval_id,
        "grant",
        json!({"decided_by": "alice"}),
    )
    .await;
    assert_eq!(status, 204, "{body}");
    assert_eq!(execution(&kernel, &run.id).await["status"], "running");

    let resumed = Run::attach(&kernel, &mut agent, &run.id).await;
    let proceed = resumed.submit(call).await;
    assert_eq!(proceed["decision"], "proceed");
    assert_eq!(proceed["step_id"], blocked["step_id"]);
    kernel.shutdown().await;
}

/// Go: TestApprovalFlowAtMostOnce (internal/kernel/kernel_test.go)
#[tokio::test]
async fn an_approved_at_most_once_step_still_runs() {
    let (kernel, mut agent) = kernel_with_policy(APPROVE_WRITE).await;
    let run = start(&kernel, &mut agent).await;
    let mut call = tool("write", json!({"path": "/tmp"}));
    call["idempotency"] = json!("at_most_once");

    let blocked = run.submit(call.clone()).await;
    assert_eq!(blocked["decision"], "blocked");
    let approval_id = blocked["approval_id"].as_str().unwrap().to_owned();
    let (status, _) = decide(
        &kernel,
        &approval_id,
        "grant",
        json!({"decided_by": "alice"}),
    )
    .await;
    assert_eq!(status, 204);

    let resumed = Run::attach(&kernel, &mut agent, &run.id).await;
    let proceed = resumed.submit(call).await;
    assert_eq!(proceed["decision"], "proceed", "{proceed}");
    kernel.shutdown().await;
}

/// Go: TestApprovalResumeEnqueuesDispatch (internal/kernel/kernel_test.go)
#[tokio::test]
async fn a_grant_queues_a_fresh_dispatch_at_once() {
    let (kernel, mut agent) = kernel_with_policy(APPROVE_WRITE).await;
    let run = start(&kernel, &mut agent).await;
    let blocked = run.submit(tool("write", json!({"path": "/tmp"}))).await;
    let approval_id = blocked["approval_id"].as_str().unwrap().to_owned();
    let (status, _) = decide(
        &kernel,
        &approval_id,
        "grant",
        json!({"decided_by": "alice"}),
    )
    .await;
    assert_eq!(status, 204);

    let types = event_types(&kernel, &run.id);
    let granted = types.iter().position(|t| t == "approval.granted").unwrap();
    assert!(
        types[granted..].iter().any(|t| t == "dispatch.queued"),
        "{types:?}"
    );
    let resumed = agent.next().await;
    assert_eq!(resumed.execution_id, run.id.to_string());
    assert_ne!(resumed.dispatch_id, run.dispatch);
    kernel.shutdown().await;
}

/// Go: TestLLMCallFlow (internal/kernel/kernel_test.go)
#[tokio::test]
async fn an_llm_call_proceeds_records_and_replays_like_a_tool_call() {
    let (kernel, mut agent) = common::kernel_with_agent().await;
    let run = start(&kernel, &mut agent).await;
    let step_id = step_id_of(&run.id, "llm_call", "gpt-4", &gpt_request(), 0);

    let first = run.submit(llm_step()).await;
    assert_eq!(first["decision"], "proceed");
    assert_eq!(first["step_id"], step_id);
    // The same call again while the first is executing is accepted, not a divergence.
    let again = run.submit(llm_step()).await;
    assert_eq!(again["decision"], "proceed");

    let response = json!({"choices": [{"message": {"content": "hello"}}]});
    run.complete(&step_id, json!({"result": response})).await;
    let run = redrive(&kernel, &mut agent, &run).await;
    let replay = run.submit(llm_step()).await;
    assert_eq!(replay["decision"], "replay");
    assert_eq!(replay["result"], response);
    assert_eq!(step(&run, &step_id).await["status"], "succeeded");
    kernel.shutdown().await;
}

/// Go: TestTerminalRejectsFurtherSteps (internal/kernel/kernel_test.go)
#[tokio::test]
async fn a_submit_after_cancel_is_told_the_execution_is_terminal() {
    let (kernel, mut agent) = common::kernel_with_agent().await;
    let run = start(&kernel, &mut agent).await;
    assert_eq!(cancel(&kernel, &run.id).await.0, 204);
    let decision = run.submit(tool("read", json!({}))).await;
    assert_eq!(decision, json!({"decision": "execution_terminal"}));
    kernel.shutdown().await;
}

const RATE_LIMIT_READ: &str = r"
rules:
  - id: rate-limit-read
    when: { target: read }
    then:
      decision: allow
      rate_limit: { max_calls: 1, window: 1h, per_what: execution }
";

/// Go: TestRateLimitDoubleStep (internal/kernel/kernel_test.go)
#[tokio::test]
async fn a_second_call_over_the_rate_limit_is_refused_without_a_step() {
    let (kernel, mut agent) = kernel_with_policy(RATE_LIMIT_READ).await;
    let run = start(&kernel, &mut agent).await;
    let call = tool("read", json!({"path": "/tmp"}));

    assert_eq!(run.submit(call.clone()).await["decision"], "proceed");
    let limited = run.submit(call).await;
    assert_eq!(limited["decision"], "rate_limited");
    assert_eq!(limited["reason"], "rate_limit_exceeded");

    let events = events_of(&kernel, &run.id, "step.rate_limited");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].payload["rule_id"], "rate-limit-read");
    assert_eq!(events[0].payload["target"], "read");
    assert_eq!(events[0].payload["error"]["reason"], "rate_limit_exceeded");
    assert_eq!(
        kernel.steps(&run.id).len(),
        1,
        "the refused call records no step"
    );
    kernel.shutdown().await;
}

const APPROVE_LLM: &str = r"
rules:
  - id: approve-llm
    when: { step_kind: llm_call }
    then:
      decision: require_approval
      approval_config: { timeout: 1h, message: approve llm }
";

/// Starts a run and submits the LLM call its policy gates: (run, step id, approval id).
async fn blocked_llm(kernel: &DevKernel, agent: &mut FakeAgent) -> (Run, String, String) {
    let run = start(kernel, agent).await;
    let blocked = run.submit(llm_step()).await;
    assert_eq!(blocked["decision"], "blocked", "{blocked}");
    let step_id = blocked["step_id"].as_str().unwrap().to_owned();
    let approval_id = blocked["approval_id"].as_str().unwrap().to_owned();
    (run, step_id, approval_id)
}

/// Go: TestApprovalGrantRecordsActualStepKind (internal/kernel/kernel_test.go)
#[tokio::test]
async fn a_grant_records_the_llm_step_kind() {
    let (kernel, mut agent) = kernel_with_policy(APPROVE_LLM).await;
    let (run, _, approval_id) = blocked_llm(&kernel, &mut agent).await;
    let (status, _) = decide(
        &kernel,
        &approval_id,
        "grant",
        json!({"decided_by": "alice"}),
    )
    .await;
    assert_eq!(status, 204);
    assert_eq!(step_type(&kernel, &run.id, "step.allowed"), "llm_call");
    kernel.shutdown().await;
}

/// Go: TestApprovalDenyRecordsActualStepKind (internal/kernel/kernel_test.go)
#[tokio::test]
async fn a_denial_records_the_llm_step_kind_once() {
    let (kernel, mut agent) = kernel_with_policy(APPROVE_LLM).await;
    let (run, _, approval_id) = blocked_llm(&kernel, &mut agent).await;
    let (status, _) = decide(&kernel, &approval_id, "deny", json!({"decided_by": "bob"})).await;
    assert_eq!(status, 204);
    assert_eq!(step_type(&kernel, &run.id, "step.denied"), "llm_call");
    assert_eq!(terminal_step_events(&kernel, &run.id), ["step.denied"]);
    kernel.shutdown().await;
}

/// Go: TestApprovalDenyResumesExecution (internal/kernel/kernel_test.go)
#[tokio::test]
async fn a_denial_resumes_the_execution_and_the_re_proposal_stays_denied() {
    let (kernel, mut agent) = kernel_with_policy(APPROVE_LLM).await;
    let (run, _, approval_id) = blocked_llm(&kernel, &mut agent).await;
    let (status, _) = decide(&kernel, &approval_id, "deny", json!({"decided_by": "bob"})).await;
    assert_eq!(status, 204);
    assert_eq!(execution(&kernel, &run.id).await["status"], "running");

    let resumed = Run::attach(&kernel, &mut agent, &run.id).await;
    let denied = resumed.submit(llm_step()).await;
    assert_eq!(denied["decision"], "denied");
    assert_eq!(denied["reason"], "approval_denied");

    // The approver is not asked a second time.
    let (status, pending) = call(&kernel, "GET", "/v0/approvals", None).await;
    assert_eq!(status, 200);
    assert_eq!(pending, json!([]));
    let (status, again) = decide(&kernel, &approval_id, "deny", json!({"decided_by": "bob"})).await;
    assert!(
        status == 204 || (status == 409 && again["code"] == "conflict"),
        "{status} {again}"
    );
    kernel.shutdown().await;
}

/// Go: TestApprovalDenyRationaleReachesHandler (internal/kernel/kernel_test.go)
#[tokio::test]
async fn a_denial_rationale_is_the_reason_the_handler_gets() {
    let (kernel, mut agent) = kernel_with_policy(APPROVE_LLM).await;
    let (run, _, approval_id) = blocked_llm(&kernel, &mut agent).await;
    let rationale = "use the helper that already exists instead";
    let (status, _) = decide(
        &kernel,
        &approval_id,
        "deny",
        json!({"decided_by": "bob", "rationale": rationale}),
    )
    .await;
    assert_eq!(status, 204);
    let resumed = Run::attach(&kernel, &mut agent, &run.id).await;
    let denied = resumed.submit(llm_step()).await;
    assert_eq!(denied["decision"], "denied");
    assert_eq!(denied["reason"], rationale);
    kernel.shutdown().await;
}

/// Go: TestApprovalExpireRecordsActualStepKind (internal/kernel/kernel_test.go)
#[tokio::test]
async fn an_expiry_records_the_llm_step_kind_once() {
    let gate = "rules:\n  - id: approve-llm\n    when: { step_kind: llm_call }\n    then: { decision: require_approval, approval_config: { timeout: 1ms } }\n";
    let (kernel, mut agent) = manual_kernel(Some(gate)).await;
    let (run, _, _) = blocked_llm(&kernel, &mut agent).await;
    kernel.advance(Duration::from_millis(10)).unwrap();
    assert_eq!(step_type(&kernel, &run.id, "step.denied"), "llm_call");
    assert_eq!(terminal_step_events(&kernel, &run.id), ["step.denied"]);
    kernel.shutdown().await;
}

/// Go: TestCancelExecutionRecordsActualStepKind (internal/kernel/kernel_test.go)
#[tokio::test]
async fn a_cancel_denies_the_waiting_llm_step_once() {
    let (kernel, mut agent) = kernel_with_policy(APPROVE_LLM).await;
    let (run, _, _) = blocked_llm(&kernel, &mut agent).await;
    assert_eq!(cancel(&kernel, &run.id).await.0, 204);
    assert_eq!(step_type(&kernel, &run.id, "step.denied"), "llm_call");
    assert_eq!(terminal_step_events(&kernel, &run.id), ["step.denied"]);
    kernel.shutdown().await;
}

/// Go: TestCompleteStepAfterExecutionCancelled (internal/kernel/kernel_test.go)
#[tokio::test]
async fn completing_a_step_of_a_cancelled_execution_records_nothing() {
    let (kernel, mut agent) = common::kernel_with_agent().await;
    let run = start(&kernel, &mut agent).await;
    let args = json!({"path": "/tmp"});
    let step_id = step_id_of(&run.id, "tool_call", "read", &args, 0);
    assert_eq!(run.submit(tool("read", args)).await["decision"], "proceed");
    assert_eq!(cancel(&kernel, &run.id).await.0, 204);

    let late = run
        .complete(&step_id, json!({"result": {"ok": true}}))
        .await;
    assert_eq!(late["decision"], "execution_terminal");
    assert!(events_of(&kernel, &run.id, "step.succeeded").is_empty());
    assert_ne!(step(&run, &step_id).await["status"], "succeeded");
    kernel.shutdown().await;
}

/// Go: TestFailStepAfterExecutionCancelled (internal/kernel/kernel_test.go)
#[tokio::test]
async fn failing_a_step_of_a_cancelled_execution_records_nothing() {
    let (kernel, mut agent) = common::kernel_with_agent().await;
    let run = start(&kernel, &mut agent).await;
    let args = json!({"path": "/tmp"});
    let step_id = step_id_of(&run.id, "tool_call", "read", &args, 0);
    assert_eq!(run.submit(tool("read", args)).await["decision"], "proceed");
    assert_eq!(cancel(&kernel, &run.id).await.0, 204);

    let (status, late) = run
        .post(
            &format!("/steps/{step_id}/fail"),
            r#"{"error": {"reason": "boom"}}"#,
        )
        .await;
    assert_eq!(status, 200, "{late}");
    assert_eq!(late["decision"], "execution_terminal");
    assert!(events_of(&kernel, &run.id, "step.failed").is_empty());
    assert_ne!(step(&run, &step_id).await["status"], "failed");
    kernel.shutdown().await;
}

/// Go: TestCancelExecutionCancelsInFlightSteps (internal/kernel/kernel_test.go)
#[tokio::test]
async fn a_cancel_settles_executing_steps_as_cancelled() {
    let (kernel, mut agent) = common::kernel_with_agent().await;
    let run = start(&kernel, &mut agent).await;
    let args = json!({"cmd": "sleep 60"});
    let step_id = step_id_of(&run.id, "tool_call", "bash", &args, 0);
    assert_eq!(run.submit(tool("bash", args)).await["decision"], "proceed");
    assert_eq!(cancel(&kernel, &run.id).await.0, 204);

    let cancelled = step(&run, &step_id).await;
    assert_eq!(cancelled["status"], "cancelled");
    assert!(cancelled["completed_at"].is_string(), "{cancelled}");
    assert_eq!(terminal_step_events(&kernel, &run.id), ["step.cancelled"]);
    kernel.shutdown().await;
}

/// Go: TestCancelExecutionCancelsPendingApprovals (internal/kernel/kernel_test.go)
#[tokio::test]
async fn a_cancel_expires_the_pending_approval() {
    let (kernel, mut agent) = kernel_with_policy(APPROVE_LLM).await;
    let (run, _, approval_id) = blocked_llm(&kernel, &mut agent).await;
    assert_eq!(cancel(&kernel, &run.id).await.0, 204);
    assert_eq!(approval(&kernel, &approval_id).await["status"], "expired");
    kernel.shutdown().await;
}

const FS_WRITE_GATE: &str = "
default_action: deny
rules:
  - id: approve-fs-writes
    when:
      target: fs_write
    then:
      decision: require_approval
      reason: filesystem writes need approval
";

/// Go: TestApprovalConfigFromYAMLBundleReachesApproval (internal/kernel/kernel_test.go)
#[tokio::test]
async fn the_bundle_approval_config_reaches_the_approval() {
    let bundle = format!(
        "{FS_WRITE_GATE}      approval_config:\n        approvers: [\"alice\", \"bob\"]\n        timeout: 5m\n        message: check the target path before granting\n"
    );
    let (kernel, mut agent) = kernel_with_policy(&bundle).await;
    let run = start(&kernel, &mut agent).await;
    let before = Timestamp::now();
    let blocked = run
        .submit(tool("fs_write", json!({"path": "/etc/passwd"})))
        .await;
    assert_eq!(blocked["decision"], "blocked", "{blocked}");

    let approval = approval(&kernel, blocked["approval_id"].as_str().unwrap()).await;
    assert_eq!(approval["approvers"], json!(["alice", "bob"]));
    assert_eq!(approval["message"], "check the target path before granting");
    // The kernel default is an hour: a dropped 5m would show.
    let timeout_at = Timestamp::parse(approval["timeout_at"].as_str().unwrap()).unwrap();
    let gap = timeout_at.unix_nanos() - before.unix_nanos();
    assert!(gap <= Duration::from_secs(360).as_nanos() as i128, "{gap}");
    kernel.shutdown().await;
}

/// A kernel whose `fs_write` gate carries `approval_config`, and the pending approval's id.
async fn gated_approval(approval_config: &str) -> (DevKernel, FakeAgent, String) {
    let (kernel, mut agent) =
        kernel_with_policy(&format!("{FS_WRITE_GATE}{approval_config}")).await;
    let run = start(&kernel, &mut agent).await;
    let blocked = run
        .submit(tool("fs_write", json!({"path": "/etc/passwd"})))
        .await;
    let id = blocked["approval_id"].as_str().unwrap().to_owned();
    (kernel, agent, id)
}

const ALICE_AND_BOB: &str = "      approval_config:\n        approvers: [\"alice\", \"bob\"]\n";

/// Go: TestApproversGateWhoMayDecide/a non-approver cannot grant (internal/kernel/kernel_test.go)
#[tokio::test]
async fn a_non_approver_cannot_grant_and_leaves_no_trace() {
    let (kernel, _agent, id) = gated_approval(ALICE_AND_BOB).await;
    let (status, body) = decide(&kernel, &id, "grant", json!({"decided_by": "carol"})).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("forbidden")));
    let after = approval(&kernel, &id).await;
    assert_eq!(after["status"], "pending");
    assert!(
        after
            .get("decided_by")
            .is_none_or(|v| v == "" || v.is_null()),
        "{after}"
    );
    assert!(
        after.get("decided_at").is_none_or(Value::is_null),
        "{after}"
    );
    kernel.shutdown().await;
}

/// Go: TestApproversGateWhoMayDecide/a non-approver cannot deny (internal/kernel/kernel_test.go)
#[tokio::test]
async fn a_non_approver_cannot_deny() {
    let (kernel, _agent, id) = gated_approval(ALICE_AND_BOB).await;
    let (status, body) = decide(&kernel, &id, "deny", json!({"decided_by": "carol"})).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("forbidden")));
    assert_eq!(approval(&kernel, &id).await["status"], "pending");
    kernel.shutdown().await;
}

/// Go: TestApproversGateWhoMayDecide/a listed approver can grant (internal/kernel/kernel_test.go)
#[tokio::test]
async fn a_listed_approver_can_grant() {
    let (kernel, _agent, id) = gated_approval(ALICE_AND_BOB).await;
    let (status, body) = decide(&kernel, &id, "grant", json!({"decided_by": "bob"})).await;
    assert_eq!(status, 204, "{body}");
    let after = approval(&kernel, &id).await;
    assert_eq!(after["status"], "granted");
    assert_eq!(after["decided_by"], "bob");
    kernel.shutdown().await;
}

/// Go: TestApproversGateWhoMayDecide/no approvers means anyone may grant (internal/kernel/kernel_test.go)
#[tokio::test]
async fn without_approvers_anyone_may_grant() {
    let (kernel, _agent, id) = gated_approval("").await;
    let (status, body) = decide(&kernel, &id, "grant", json!({"decided_by": "carol"})).await;
    assert_eq!(status, 204, "{body}");
    kernel.shutdown().await;
}

/// Go: TestIndeterminateRetryIsDenied (internal/kernel/kernel_test.go)
#[tokio::test]
async fn an_indeterminate_at_most_once_effect_is_not_retried() {
    let (kernel, mut agent) = common::kernel_with_agent().await;
    let run = start(&kernel, &mut agent).await;
    let email = |to: &str| json!({"kind": "tool_call", "target": "send_email", "args": {"to": to}, "idempotency": "at_most_once"});
    assert_eq!(
        run.submit(email("a@example.com")).await["decision"],
        "proceed"
    );

    // No outcome was recorded: the next attempt finds the effect mid-flight.
    let run = redrive(&kernel, &mut agent, &run).await;
    let replay = run.submit(email("a@example.com")).await;
    assert_eq!(replay["decision"], "replay");
    let error = replay["error"].to_string();
    assert!(error.contains("indeterminate"), "{error}");
    assert!(error.contains("outcome unknown"), "{error}");

    // Calling it again is a fresh occurrence, which the kernel refuses.
    let denied = run.submit(email("a@example.com")).await;
    assert_eq!(denied["decision"], "denied");
    let refusal = denied["reason"].as_str().unwrap().to_owned();
    assert!(!refusal.is_empty());
    // A different effect on the same target still runs.
    assert_eq!(
        run.submit(email("b@example.com")).await["decision"],
        "proceed"
    );

    // A later attempt replays both and learns why the retry was refused.
    let run = redrive(&kernel, &mut agent, &run).await;
    run.submit(email("a@example.com")).await;
    let again = run.submit(email("a@example.com")).await;
    assert_eq!(again["reason"], refusal.as_str());
    kernel.shutdown().await;
}

/// Go: TestDenyReasonMatchesOnReplay (internal/kernel/kernel_test.go)
#[tokio::test]
async fn a_denial_without_a_reason_says_policy_denied_every_time() {
    let deny =
        "rules:\n  - id: deny-read\n    when: { target: read }\n    then: { decision: deny }\n";
    let (kernel, mut agent) = kernel_with_policy(deny).await;
    let run = start(&kernel, &mut agent).await;
    let first = run.submit(tool("read", json!({}))).await;
    assert_eq!(first["decision"], "denied");
    assert_eq!(first["reason"], "policy_denied");
    let again = run.submit(tool("read", json!({}))).await;
    assert_eq!(again["reason"], first["reason"]);
    kernel.shutdown().await;
}

/// A manual-clock kernel limiting `read` to one call per `window`, waiting up to `max_wait`.
async fn parking_kernel(window: &str, max_wait: &str) -> (DevKernel, FakeAgent) {
    let policy = format!(
        "rules:\n  - id: rate-limit-read\n    when: {{ target: read }}\n    then:\n      decision: allow\n      rate_limit: {{ max_calls: 1, window: {window}, per_what: execution, max_wait: {max_wait} }}\n"
    );
    manual_kernel(Some(&policy)).await
}

/// Go: TestRateLimitParksForRedispatch (internal/kernel/kernel_test.go)
#[tokio::test]
async fn a_limited_call_within_max_wait_parks_on_a_deferred_dispatch() {
    let (kernel, mut agent) = parking_kernel("1m", "5m").await;
    let run = start(&kernel, &mut agent).await;
    let call = tool("read", json!({"path": "/tmp"}));
    assert_eq!(run.submit(call.clone()).await["decision"], "proceed");

    let parked = run.submit(call).await;
    assert_eq!(
        parked,
        json!({"decision": "blocked", "reason": "rate_limit_exceeded"})
    );
    assert_eq!(execution(&kernel, &run.id).await["status"], "running");
    assert_eq!(
        kernel.steps(&run.id).len(),
        1,
        "a parked call writes no step"
    );
    let types = event_types(&kernel, &run.id);
    let limited = types.iter().position(|t| t == "step.rate_limited").unwrap();
    assert!(
        types[limited..].iter().any(|t| t == "dispatch.queued"),
        "{types:?}"
    );

    // The resume dispatch is deferred: nothing arrives until the clock passes the wait.
    assert_no_delivery(&mut agent, 200).await;
    kernel.advance(Duration::from_secs(120)).unwrap();
    let resumed = agent.next().await;
    assert_eq!(resumed.execution_id, run.id.to_string());
    assert_ne!(resumed.dispatch_id, run.dispatch);
    kernel.shutdown().await;
}

/// Go: TestRateLimitParksOnlyOnce (internal/kernel/kernel_test.go)
#[tokio::test]
async fn an_execution_parks_only_once_then_limited_calls_are_refused() {
    let (kernel, mut agent) = parking_kernel("1m", "5m").await;
    let run = start(&kernel, &mut agent).await;
    let call = tool("read", json!({"path": "/tmp"}));
    let first = run.submit(call.clone()).await;
    assert_eq!(run.submit(call.clone()).await["decision"], "blocked");

    kernel.advance(Duration::from_secs(120)).unwrap();
    let resumed = Run::attach(&kernel, &mut agent, &run.id).await;
    // The resumed handler replays what it recorded, then re-submits the limited call (the
    // bucket has refilled by the time the resume dispatch is due).
    let replayed = resumed.submit(call.clone()).await;
    assert_eq!(replayed["step_id"], first["step_id"]);
    assert_eq!(resumed.submit(call.clone()).await["decision"], "proceed");
    // Over the limit again: refused this time, and no dispatch is queued.
    let queued = events_of(&kernel, &run.id, "dispatch.queued").len();
    let refused = resumed.submit(call).await;
    assert_eq!(
        refused,
        json!({"decision": "rate_limited", "reason": "rate_limit_exceeded"})
    );
    assert_eq!(events_of(&kernel, &run.id, "dispatch.queued").len(), queued);
    kernel.shutdown().await;
}

/// Go: TestRateLimitRefusesWaitOverMaxWait (internal/kernel/kernel_test.go)
#[tokio::test]
async fn a_wait_longer_than_max_wait_is_refused_not_parked() {
    let (kernel, mut agent) = parking_kernel("1h", "1m").await;
    let run = start(&kernel, &mut agent).await;
    let call = tool("read", json!({"path": "/tmp"}));
    run.submit(call.clone()).await;
    let refused = run.submit(call).await;
    assert_eq!(
        refused,
        json!({"decision": "rate_limited", "reason": "rate_limit_exceeded"})
    );
    kernel.shutdown().await;
}

/// Go: TestCompleteStepOnBlockedStepConflicts (internal/kernel/kernel_test.go)
#[tokio::test]
async fn a_step_waiting_for_approval_cannot_be_completed_or_failed() {
    let (kernel, mut agent) = kernel_with_policy(APPROVE_LLM).await;
    let (run, step_id, _) = blocked_llm(&kernel, &mut agent).await;

    let (status, body) = run
        .post(
            &format!("/steps/{step_id}/complete"),
            r#"{"result": {"ok": true}}"#,
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("conflict")),
        "{body}"
    );
    let (status, body) = run
        .post(
            &format!("/steps/{step_id}/fail"),
            r#"{"error": {"reason": "boom"}}"#,
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("conflict")),
        "{body}"
    );
    assert_eq!(step(&run, &step_id).await["status"], "awaiting_approval");
    kernel.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// internal/kernel/lifecycle_test.go
// ---------------------------------------------------------------------------------------------

/// Go: TestApprovalExpiry (internal/kernel/lifecycle_test.go)
#[tokio::test]
async fn an_expired_approval_resumes_and_the_re_proposal_is_denied_approval_timeout() {
    let gate = "rules:\n  - id: approve-write\n    when: { target: write }\n    then: { decision: require_approval, approval_config: { timeout: 1ms } }\n";
    let (kernel, mut agent) = manual_kernel(Some(gate)).await;
    let run = start(&kernel, &mut agent).await;
    let call = tool("write", json!({"path": "/tmp"}));
    assert_eq!(run.submit(call.clone()).await["decision"], "blocked");

    kernel.advance(Duration::from_millis(10)).unwrap();
    let resumed = kernel
        .wait_until(&run.id, WAIT, |s| s == ExecutionStatus::Running)
        .await
        .unwrap();
    assert_eq!(resumed.failure_reason, "");
    let resumed = Run::attach(&kernel, &mut agent, &run.id).await;
    let denied = resumed.submit(call).await;
    assert_eq!(denied["decision"], "denied");
    assert_eq!(denied["reason"], "approval_timeout");
    kernel.shutdown().await;
}

/// Go: TestCancelExpiredExecutions (internal/kernel/lifecycle_test.go)
#[tokio::test]
async fn an_execution_past_its_deadline_is_cancelled_deadline_exceeded() {
    let (kernel, _agent) = kernel_from(
        DevKernel::builder()
            .manual_clock()
            .execution_deadline(Duration::from_millis(1)),
        None,
    )
    .await;
    let (status, created) = create(&kernel, json!({"agent_id": "hello", "input": {}})).await;
    assert_eq!(status, 201, "{created}");
    assert!(created["deadline_at"].is_string(), "{created}");
    let id = created["id"].as_str().unwrap().to_owned();

    kernel.advance(Duration::from_millis(10)).unwrap();
    let done = kernel.wait_terminal(&id, WAIT).await.unwrap();
    assert_eq!(done.status, ExecutionStatus::Cancelled);
    assert_eq!(done.failure_reason, "deadline_exceeded");
    kernel.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// internal/kernel/budget_test.go
// ---------------------------------------------------------------------------------------------

/// The LLM budget rule of the Go tests: `max_tokens` per execution, `on_exceed` if any.
fn budget_policy(max_tokens: u64, on_exceed: Option<&str>, scope: Option<&str>) -> String {
    let mut budget = format!("max_tokens: {max_tokens}");
    if let Some(action) = on_exceed {
        budget.push_str(&format!(", on_exceed: {action}"));
    }
    if let Some(scope) = scope {
        budget.push_str(&format!(", scope: {scope}"));
    }
    format!(
        "rules:\n  - id: llm-budget\n    when: {{ step_kind: llm_call }}\n    then:\n      decision: allow\n      budget: {{ {budget} }}\n      approval_config: {{ timeout: 1h }}\n"
    )
}

fn usage_body(input: u64, output: u64) -> String {
    json!({"usage": {"input_tokens": input, "output_tokens": output}}).to_string()
}

/// Submits an LLM call and, when it may proceed, records `body` as the provider's response
/// (the `{status, body}` envelope the SDKs record). Returns the decision.
async fn llm_call(run: &Run, body: &str) -> Value {
    let decision = run
        .submit(json!({"kind": "llm_call", "target": "claude-opus-5", "args": {"model": "claude-opus-5"}}))
        .await;
    if decision["decision"] == "proceed" {
        let step_id = decision["step_id"].as_str().unwrap();
        let recorded = run
            .complete(step_id, json!({"result": {"status": 200, "body": body}}))
            .await;
        assert_eq!(recorded["decision"], "recorded");
    }
    decision
}

/// Go: TestBudgetDeniesOnceSpendReachesLimit (internal/kernel/budget_test.go)
#[tokio::test]
async fn the_token_budget_denies_once_spend_reaches_the_limit() {
    let (kernel, mut agent) = kernel_with_policy(&budget_policy(1000, None, None)).await;
    let run = start(&kernel, &mut agent).await;
    assert_eq!(
        llm_call(&run, &usage_body(600, 300)).await["decision"],
        "proceed"
    );
    // 900 of 1000 spent: still under.
    assert_eq!(
        llm_call(&run, &usage_body(600, 300)).await["decision"],
        "proceed"
    );
    let denied = llm_call(&run, &usage_body(10, 10)).await;
    assert_eq!(denied["decision"], "denied");
    assert_eq!(denied["reason"], "execution_token_budget_exceeded");
    kernel.shutdown().await;
}

/// Go: TestBudgetCanRequireApprovalInstead (internal/kernel/budget_test.go)
#[tokio::test]
async fn an_exceeded_budget_can_ask_for_approval_instead() {
    let (kernel, mut agent) =
        kernel_with_policy(&budget_policy(500, Some("require_approval"), None)).await;
    let run = start(&kernel, &mut agent).await;
    llm_call(&run, &usage_body(400, 200)).await;
    let blocked = llm_call(&run, &usage_body(10, 10)).await;
    assert_eq!(blocked["decision"], "blocked", "{blocked}");
    assert!(blocked["approval_id"].is_string(), "{blocked}");
    kernel.shutdown().await;
}

/// Go: TestBudgetIsBlindToUnmeasuredResponses (internal/kernel/budget_test.go)
#[tokio::test]
async fn responses_without_usage_never_trip_the_budget() {
    let (kernel, mut agent) = kernel_with_policy(&budget_policy(10, None, None)).await;
    let run = start(&kernel, &mut agent).await;
    for i in 0..3 {
        let decision = llm_call(&run, r#"{"output":"hello"}"#).await;
        assert_eq!(decision["decision"], "proceed", "call {i}");
    }
    kernel.shutdown().await;
}

/// Runs two executions of session `chat` under a 1000-token budget of `scope`: the first
/// spends 1000 tokens and completes; returns the second's first LLM decision.
async fn second_turn_under_budget(scope: &str) -> Value {
    let (kernel, mut agent) = kernel_with_policy(&budget_policy(1000, None, Some(scope))).await;
    let body = r#"{"agent_id":"hello","input":{},"session":"chat"}"#;
    let first = Run::start(&kernel, &mut agent, body).await;
    llm_call(&first, &usage_body(600, 400)).await;
    let (status, _) = first.post("/complete", r#"{"output": {}}"#).await;
    assert_eq!(status, 204);
    let second = Run::start(&kernel, &mut agent, body).await;
    let decision = llm_call(&second, &usage_body(1, 1)).await;
    kernel.shutdown().await;
    decision
}

/// Go: TestSessionBudgetCountsEarlierExecutionsInTheSession/memory/execution (internal/kernel/budget_test.go)
#[tokio::test]
async fn an_execution_budget_ignores_earlier_turns_of_the_session() {
    assert_eq!(
        second_turn_under_budget("execution").await["decision"],
        "proceed"
    );
}

/// Go: TestSessionBudgetCountsEarlierExecutionsInTheSession/memory/session (internal/kernel/budget_test.go)
#[tokio::test]
async fn a_session_budget_counts_earlier_turns_of_the_session() {
    let decision = second_turn_under_budget("session").await;
    assert_eq!(decision["decision"], "denied", "{decision}");
}

/// Go: TestSessionRateLimitSharesCallsAcrossTheSession (internal/kernel/budget_test.go)
#[tokio::test]
async fn a_session_rate_limit_is_shared_by_the_executions_of_the_session() {
    let policy = "rules:\n  - id: one-read-per-session\n    when: { target: read }\n    then:\n      decision: allow\n      rate_limit: { max_calls: 1, window: 1h, per_what: session }\n";
    let (kernel, mut agent) = kernel_with_policy(policy).await;
    for (session, want) in [
        ("chat", "proceed"),
        ("chat", "rate_limited"),
        ("other", "proceed"),
    ] {
        let body = json!({"agent_id": "hello", "input": {}, "session": session}).to_string();
        let run = Run::start(&kernel, &mut agent, &body).await;
        let decision = run.submit(tool("read", json!({}))).await;
        let (status, _) = run.post("/complete", r#"{"output": {}}"#).await;
        assert_eq!(status, 204);
        assert_eq!(decision["decision"], want, "read in {session}: {decision}");
    }
    kernel.shutdown().await;
}

/// Go: TestDecisionEventsRecordThePolicyHash (internal/kernel/budget_test.go)
#[tokio::test]
async fn step_allowed_records_the_sha256_of_the_bundle() {
    let bundle = "default_action: allow\n";
    let (kernel, mut agent) = common::kernel_with_agent().await;
    let (status, _) = call(
        &kernel,
        "POST",
        "/v0/policies/hello",
        Some(json!({"bundle": bundle})),
    )
    .await;
    assert_eq!(status, 204);
    let run = start(&kernel, &mut agent).await;
    run.submit(tool("read", json!({}))).await;

    let digest: String = Sha256::digest(bundle.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let allowed = events_of(&kernel, &run.id, "step.allowed");
    assert_eq!(allowed[0].payload["policy_hash"], digest.as_str());
    kernel.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// internal/kernel/idempotency_test.go
// ---------------------------------------------------------------------------------------------

/// Go: TestIdempotencyKeyCreatesOneExecution/memory (internal/kernel/idempotency_test.go)
#[tokio::test]
async fn concurrent_creates_with_one_idempotency_key_make_one_execution() {
    let (kernel, _agent) = common::kernel_with_agent().await;
    let other_agent = FakeAgent::start().await;
    kernel
        .register_agent(AgentSpec::new("agent-2", &other_agent.url, SECRET))
        .unwrap();
    let url = format!("{}/v0/executions", kernel.url());
    let body = r#"{"agent_id":"hello","input":{},"idempotency_key":"step-1"}"#;
    let creates = (0..12).map(|_| {
        let url = url.clone();
        tokio::spawn(async move { client("POST", &url, None, Some(body)).await })
    });
    let mut ids = Vec::new();
    for create in creates.collect::<Vec<_>>() {
        let (status, created) = create.await.unwrap();
        assert_eq!(status, 201, "{created}");
        ids.push(created["id"].as_str().unwrap().to_owned());
    }
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");

    let (status, page) = call(&kernel, "GET", "/v0/executions?agent_id=hello", None).await;
    assert_eq!(status, 200);
    let executions = page["executions"].as_array().unwrap();
    assert_eq!(executions.len(), 1, "{page}");
    assert_eq!(executions[0]["idempotency_key"], "step-1");

    // The key is per agent.
    let (status, other) = create(
        &kernel,
        json!({"agent_id": "agent-2", "input": {}, "idempotency_key": "step-1"}),
    )
    .await;
    assert_eq!(status, 201, "{other}");
    assert_ne!(other["id"].as_str().unwrap(), ids[0]);
    kernel.shutdown().await;
}

/// Go: TestIdempotencyKeyReplaysContinuation (internal/kernel/idempotency_test.go)
#[tokio::test]
async fn an_idempotent_continuation_returns_the_same_execution() {
    let (kernel, mut agent) = common::kernel_with_agent().await;
    let parent = Run::start(
        &kernel,
        &mut agent,
        r#"{"agent_id":"hello","input":{},"session":"first"}"#,
    )
    .await;
    let (status, _) = parent.post("/complete", r#"{"output": {}}"#).await;
    assert_eq!(status, 204);

    let body = json!({
        "agent_id": "hello",
        "input": {},
        "session": "second",
        "parent_execution_id": parent.id,
        "idempotency_key": "continue",
    });
    let (status, first) = create(&kernel, body.clone()).await;
    assert_eq!(status, 201, "{first}");
    let (status, again) = create(&kernel, body).await;
    assert_eq!(status, 201, "{again}");
    assert_eq!(again["id"], first["id"]);
    kernel.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// internal/kernel/agent_test.go
// ---------------------------------------------------------------------------------------------

/// A rule without an id: the bundle does not compile.
const INVALID_BUNDLE: &str =
    "rules:\n  - priority: 1\n    when:\n      target: write\n    then:\n      decision: allow\n";

const VALID_BUNDLE: &str = "rules:\n  - id: allow-write\n    priority: 1\n    when:\n      target: write\n    then:\n      decision: allow\n";

/// Go: TestLoadPolicyBundleRejectsInvalid (internal/kernel/agent_test.go)
#[tokio::test]
async fn an_uncompilable_bundle_is_rejected_and_not_stored() {
    let (kernel, _agent) = common::kernel_with_agent().await;
    let (status, body) = call(
        &kernel,
        "POST",
        "/v0/policies/hello",
        Some(json!({"bundle": INVALID_BUNDLE})),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("validation_error"))
    );
    let (_, agent) = call(&kernel, "GET", "/v0/agents/hello", None).await;
    assert!(
        agent
            .get("policy_bundle")
            .is_none_or(|b| b == "" || b.is_null()),
        "{agent}"
    );
    kernel.shutdown().await;
}

/// Go: TestLoadPolicyBundleAcceptsValid (internal/kernel/agent_test.go)
#[tokio::test]
async fn a_valid_bundle_is_stored_verbatim() {
    let (kernel, _agent) = common::kernel_with_agent().await;
    let (status, body) = call(
        &kernel,
        "POST",
        "/v0/policies/hello",
        Some(json!({"bundle": VALID_BUNDLE})),
    )
    .await;
    assert_eq!(status, 204, "{body}");
    let (_, agent) = call(&kernel, "GET", "/v0/agents/hello", None).await;
    assert_eq!(agent["policy_bundle"], VALID_BUNDLE);
    kernel.shutdown().await;
}

/// Go: TestRegisterAgentRejectsInvalidBundle (internal/kernel/agent_test.go). The Go HTTP
/// registration takes no bundle (bundles arrive with provisioning), so this goes through the
/// harness registration, the dev kernel's provisioning path.
#[tokio::test]
async fn an_agent_with_an_uncompilable_bundle_is_not_registered() {
    let (kernel, agent) = common::kernel_with_agent().await;
    let spec = AgentSpec::new("agent-2", &agent.url, SECRET).policy_yaml(INVALID_BUNDLE);
    assert!(kernel.register_agent(spec).is_err());
    let (status, _) = call(&kernel, "GET", "/v0/agents/agent-2", None).await;
    assert_eq!(status, 404);
    kernel.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// internal/kernel/execution_test.go (pre-redesign file; the scenarios that carry over)
// ---------------------------------------------------------------------------------------------

/// Go: TestCreateExecutionMissingAgentID (internal/kernel/execution_test.go)
#[tokio::test]
async fn a_create_without_an_agent_is_a_validation_error() {
    let (kernel, _agent) = common::kernel_with_agent().await;
    let (status, body) = create(&kernel, json!({"input": {}})).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("validation_error"))
    );
    kernel.shutdown().await;
}

/// Go: TestGetExecutionNotFound (internal/kernel/execution_test.go)
#[tokio::test]
async fn an_unknown_execution_is_not_found() {
    let (kernel, _agent) = common::kernel_with_agent().await;
    let id = Uuid::now_v7();
    let (status, body) = call(&kernel, "GET", &format!("/v0/executions/{id}"), None).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
    kernel.shutdown().await;
}

/// Go: TestCancelExecution (internal/kernel/execution_test.go)
#[tokio::test]
async fn a_cancel_ends_the_log_with_execution_cancelled() {
    let (kernel, mut agent) = common::kernel_with_agent().await;
    let run = start(&kernel, &mut agent).await;
    kernel
        .wait_for_event(&run.id, EventKind::DispatchAcked, WAIT)
        .await
        .unwrap();
    assert_eq!(cancel(&kernel, &run.id).await.0, 204);
    let types = event_types(&kernel, &run.id);
    assert_eq!(
        types.last().map(String::as_str),
        Some("execution.cancelled")
    );
    kernel.shutdown().await;
}

/// Go: TestCancelExecutionNotFound (internal/kernel/execution_test.go)
#[tokio::test]
async fn cancelling_an_unknown_execution_is_not_found() {
    let (kernel, _agent) = common::kernel_with_agent().await;
    let (status, body) = cancel(&kernel, &Uuid::now_v7().to_string()).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
    kernel.shutdown().await;
}

/// Go: TestCancelTerminalExecutionFails (internal/kernel/execution_test.go). The newest Go
/// kernel answers a second cancel with `409 conflict` (the pre-redesign one used
/// `execution_terminal`).
#[tokio::test]
async fn cancelling_twice_is_a_conflict() {
    let (kernel, mut agent) = common::kernel_with_agent().await;
    let run = start(&kernel, &mut agent).await;
    assert_eq!(cancel(&kernel, &run.id).await.0, 204);
    let (status, body) = cancel(&kernel, &run.id).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("conflict")),
        "{body}"
    );
    kernel.shutdown().await;
}

/// Go: TestCancelRunningExecutionWithActiveStep (internal/kernel/execution_test.go)
#[tokio::test]
async fn a_cancel_with_a_live_step_cancels_both() {
    let (kernel, mut agent) = common::kernel_with_agent().await;
    let run = start(&kernel, &mut agent).await;
    assert_eq!(
        run.submit(tool("web_search", json!({}))).await["decision"],
        "proceed"
    );
    assert_eq!(cancel(&kernel, &run.id).await.0, 204);
    let types = event_types(&kernel, &run.id);
    assert!(types.iter().any(|t| t == "step.cancelled"), "{types:?}");
    assert!(
        types.iter().any(|t| t == "execution.cancelled"),
        "{types:?}"
    );
    assert_eq!(execution(&kernel, &run.id).await["status"], "cancelled");
    kernel.shutdown().await;
}
