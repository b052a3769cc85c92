//! Conformance: dispatch leases, delivery and reclaim, and session admission, after the Go
//! kernel's `internal/kernel/dispatch_test.go`, `dispatch_lease_test.go` and
//! `concurrency_test.go`. Lease expiry runs on a manual clock, so a two-minute lease passes in
//! no real time; a superseded attempt is made with [`DevKernel::redeliver`] (reclaim and
//! re-claim at once, as the Go tests' `supersede` helper does).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use rebuno::Secret;
use rebuno::signing::verify_webhook;
use rebuno::wire::ExecutionStatus;
use rebuno_devkernel::{AgentSpec, DevKernel, EventKind};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use uuid::Uuid;

use crate::common::{
    AgentClient, Delivery, FakeAgent, Run, SECRET, client, event_types, events_of,
};

/// The kernel's default lease period.
const LEASE: Duration = Duration::from_secs(120);
const SECOND: Duration = Duration::from_secs(1);
const WAIT: Duration = Duration::from_secs(5);

/// Allows `read`; `fs_write` requires an approval (an hour to decide).
const APPROVAL_POLICY: &str = r"
rules:
  - id: allow-read
    when: { target: read }
    then: { decision: allow }
  - id: approve-fs-write
    when: { target: fs_write }
    then:
      decision: require_approval
      approval_config: { timeout: 1h, message: approve write }
";

/// A kernel on a manual clock with `hello` (and `policy`) delivering to `url`.
async fn manual(url: &str, policy: Option<&str>) -> DevKernel {
    let mut spec = AgentSpec::new("hello", url, SECRET);
    if let Some(yaml) = policy {
        spec = spec.policy_yaml(yaml);
    }
    DevKernel::builder()
        .manual_clock()
        .agent(spec)
        .start()
        .await
        .unwrap()
}

fn read(path: &str) -> Value {
    json!({"kind": "tool_call", "target": "read", "args": {"path": path}})
}

/// Waits (polling in real time) until `id` has `count` events of `kind`.
async fn wait_count(kernel: &DevKernel, id: &str, kind: &str, count: usize) {
    for _ in 0..500 {
        if events_of(kernel, id, kind).len() >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("fewer than {count} {kind} in {:?}", event_types(kernel, id));
}

/// Waits until the attempt's webhook answer is recorded (`dispatch.acked`).
async fn acked(kernel: &DevKernel, id: &str, count: usize) {
    wait_count(kernel, id, "dispatch.acked", count).await;
}

/// `GET /v0/executions/{id}/steps/{step_id}`, signed by the agent.
async fn step(run: &Run, step_id: &str) -> Value {
    let target = format!("/v0/executions/{}/steps/{step_id}", run.id);
    let (status, body) = run.api.send("GET", &target, None, "").await;
    assert_eq!(status, 200, "{body}");
    body
}

/// The execution as a client sees it.
async fn execution(kernel: &DevKernel, id: &str) -> Value {
    let url = format!("{}/v0/executions/{id}", kernel.url());
    let (status, body) = client("GET", &url, None, None).await;
    assert_eq!(status, 200, "{body}");
    body
}

fn assert_superseded((status, body): (u16, Value)) {
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["code"], "lease_superseded", "{body}");
}

/// A webhook server answering from a script: the `i`-th call gets `answers[i]` (200 past the
/// end); the first `hold` calls wait until `release` is called. It counts calls and how many
/// were in flight at once, and keeps each call's signature and body.
struct Hook {
    url: String,
    rx: mpsc::UnboundedReceiver<Delivery>,
    shared: Arc<HookShared>,
    release: watch::Sender<bool>,
}

struct HookShared {
    answers: Vec<StatusCode>,
    hold: usize,
    calls: AtomicUsize,
    live: AtomicUsize,
    peak: AtomicUsize,
    signed: Mutex<Vec<(String, Bytes)>>,
    tx: mpsc::UnboundedSender<Delivery>,
    released: watch::Receiver<bool>,
}

async fn hook(State(s): State<Arc<HookShared>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let call = s.calls.fetch_add(1, Ordering::SeqCst);
    let live = s.live.fetch_add(1, Ordering::SeqCst) + 1;
    s.peak.fetch_max(live, Ordering::SeqCst);
    let signature = headers
        .get("rebuno-signature")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    s.signed.lock().unwrap().push((signature, body.clone()));
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let _ = s.tx.send(Delivery {
        execution_id: json["execution_id"].as_str().unwrap_or_default().to_owned(),
        dispatch_id: json["dispatch_id"].as_str().unwrap_or_default().to_owned(),
        attempt: u32::try_from(json["dispatch_attempt"].as_u64().unwrap_or(0)).unwrap(),
        lease_timeout_seconds: json["lease_timeout_seconds"].as_f64().unwrap_or(0.0),
        raw: String::from_utf8_lossy(&body).into_owned(),
    });
    if call < s.hold {
        let mut released = s.released.clone();
        let _ = released.wait_for(|r| *r).await;
    }
    s.live.fetch_sub(1, Ordering::SeqCst);
    s.answers.get(call).copied().unwrap_or(StatusCode::OK)
}

impl Hook {
    async fn start(answers: &[StatusCode], hold: usize) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let (release, released) = watch::channel(false);
        let shared = Arc::new(HookShared {
            answers: answers.to_vec(),
            hold,
            calls: AtomicUsize::new(0),
            live: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            signed: Mutex::new(Vec::new()),
            tx,
            released,
        });
        let app = Router::new()
            .route("/webhook", post(hook))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/webhook", listener.local_addr().unwrap());
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            url,
            rx,
            shared,
            release,
        }
    }

    async fn next(&mut self) -> Delivery {
        tokio::time::timeout(WAIT, self.rx.recv())
            .await
            .expect("no delivery within 5 s")
            .expect("hook channel closed")
    }

    fn release(&self) {
        self.release.send_replace(true);
    }

    fn calls(&self) -> usize {
        self.shared.calls.load(Ordering::SeqCst)
    }
}

/// A real-time kernel delivering to `url` with millisecond retry backoff.
async fn retrying(url: &str, attempts: u32) -> DevKernel {
    DevKernel::builder()
        .max_attempts(attempts)
        .retry_backoff(Duration::from_millis(1), Duration::from_millis(5))
        .agent(AgentSpec::new("hello", url, SECRET))
        .start()
        .await
        .unwrap()
}

async fn create(kernel: &DevKernel, body: &str) -> Value {
    let url = format!("{}/v0/executions", kernel.url());
    let (status, created) = client("POST", &url, None, Some(body)).await;
    assert_eq!(status, 201, "{created}");
    created
}

fn id_of(created: &Value) -> String {
    created["id"].as_str().unwrap().to_owned()
}

// ---------------------------------------------------------------------------------------
// dispatch_test.go (and its older twin dispatch_lease_test.go)
// ---------------------------------------------------------------------------------------

/// Go: TestDispatchLeaseSurvivesAck (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn an_acked_dispatch_keeps_its_lease_until_it_expires_and_comes_back_under_the_same_id() {
    let mut agent = FakeAgent::start().await;
    let kernel = manual(&agent.url, None).await;
    let stalled = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello","input":{}}"#).await;
    acked(&kernel, &stalled.id, 1).await;

    // The 2xx left the lease live: it runs out and the sweeper takes it back.
    kernel.advance(LEASE + SECOND).unwrap();
    let reclaimed = events_of(&kernel, &stalled.id, "dispatch.reclaimed");
    assert_eq!(
        reclaimed.len(),
        1,
        "{:?}",
        event_types(&kernel, &stalled.id)
    );
    assert_eq!(
        reclaimed[0].payload["dispatch_id"],
        stalled.dispatch.as_str()
    );
    let live = Run::attach(&kernel, &mut agent, &stalled.id).await;
    assert_eq!(
        (live.dispatch.as_str(), live.attempt),
        (stalled.dispatch.as_str(), 2)
    );
    acked(&kernel, &stalled.id, 2).await;

    // The stalled first attempt is fenced out; the re-delivered one proceeds.
    assert_superseded(stalled.post("/steps", &read("/tmp").to_string()).await);
    assert_eq!(live.submit(read("/tmp")).await["decision"], "proceed");
    kernel.shutdown().await;
}

/// Go: TestDispatchLeaseRenewedByHeartbeat (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn a_heartbeat_renews_the_lease() {
    let mut agent = FakeAgent::start().await;
    let kernel = manual(&agent.url, None).await;
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    acked(&kernel, &run.id, 1).await;

    kernel.advance(LEASE - 20 * SECOND).unwrap();
    assert_eq!(run.post("/heartbeat", "").await.0, 204);
    // Past the lease as first handed out, within the renewed one.
    kernel.advance(LEASE - 20 * SECOND).unwrap();
    assert!(events_of(&kernel, &run.id, "dispatch.reclaimed").is_empty());
    assert_eq!(run.post("/heartbeat", "").await.0, 204);
    // Without another renewal it runs out.
    kernel.advance(LEASE + SECOND).unwrap();
    assert_eq!(events_of(&kernel, &run.id, "dispatch.reclaimed").len(), 1);
    kernel.shutdown().await;
}

/// Go: TestCompleteExecutionReleasesLease (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn completing_the_execution_retires_its_lease() {
    let mut agent = FakeAgent::start().await;
    let kernel = manual(&agent.url, None).await;
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    acked(&kernel, &run.id, 1).await;
    assert_eq!(
        run.post("/complete", r#"{"output":{"done":true}}"#).await.0,
        204
    );

    // An hour on, nothing was taken back or delivered again, and the lease is gone.
    kernel.advance(Duration::from_secs(3600)).unwrap();
    assert!(events_of(&kernel, &run.id, "dispatch.reclaimed").is_empty());
    assert!(agent.rx.try_recv().is_err());
    assert_superseded(run.post("/heartbeat", "").await);
    kernel.shutdown().await;
}

/// Go: TestApprovalBlockReleasesLease (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn an_approval_block_retires_the_lease_and_a_grant_queues_a_new_dispatch() {
    let mut agent = FakeAgent::start().await;
    let kernel = manual(&agent.url, Some(APPROVAL_POLICY)).await;
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    acked(&kernel, &run.id, 1).await;
    let blocked = run
        .submit(json!({"kind": "tool_call", "target": "fs_write", "args": {"path": "/etc"}}))
        .await;
    assert_eq!(blocked["decision"], "blocked");

    // Well past the lease (within the approval's hour), nothing is reclaimed.
    kernel.advance(10 * LEASE).unwrap();
    assert!(events_of(&kernel, &run.id, "dispatch.reclaimed").is_empty());
    assert_superseded(run.post("/heartbeat", "").await);
    assert_eq!(execution(&kernel, &run.id).await["status"], "blocked");

    let approval = blocked["approval_id"].as_str().unwrap();
    let grant = format!("{}/v0/approvals/{approval}/grant", kernel.url());
    let (status, body) = client("POST", &grant, None, Some(r#"{"decided_by":"alice"}"#)).await;
    assert!(status < 300, "{status} {body}");
    let queued = events_of(&kernel, &run.id, "dispatch.queued");
    assert_eq!(queued.len(), 2);
    assert_ne!(queued[1].payload["dispatch_id"], run.dispatch.as_str());
    assert_eq!(queued[1].payload["status"], "pending");
    let resumed = Run::attach(&kernel, &mut agent, &run.id).await;
    assert_ne!(resumed.dispatch, run.dispatch);
    assert_eq!(resumed.attempt, 1);
    kernel.shutdown().await;
}

/// Go: TestDispatchRedeliveryCapFailsExecution (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn redeliveries_of_an_acked_dispatch_are_capped_by_max_attempts() {
    let mut agent = FakeAgent::start().await;
    let kernel = DevKernel::builder()
        .manual_clock()
        .max_attempts(2)
        .agent(AgentSpec::new("hello", &agent.url, SECRET))
        .start()
        .await
        .unwrap();
    let first = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    acked(&kernel, &first.id, 1).await;
    kernel.advance(LEASE + SECOND).unwrap();
    let second = Run::attach(&kernel, &mut agent, &first.id).await;
    assert_eq!(second.attempt, 2);
    acked(&kernel, &first.id, 2).await;

    // A third attempt would exceed the cap: the execution fails instead.
    kernel.advance(LEASE + SECOND).unwrap();
    let done = kernel.wait_terminal(&first.id, WAIT).await.unwrap();
    assert_eq!(done.status, ExecutionStatus::Failed);
    assert_eq!(done.failure_reason, "dispatch_exhausted");
    assert!(agent.rx.try_recv().is_err(), "no third delivery");
    kernel.shutdown().await;
}

/// Go: TestSubmitStepRenewsLease (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn submitting_a_step_renews_the_lease() {
    let mut agent = FakeAgent::start().await;
    let kernel = manual(&agent.url, None).await;
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    acked(&kernel, &run.id, 1).await;

    kernel.advance(LEASE - 20 * SECOND).unwrap();
    assert_eq!(run.submit(read("/tmp")).await["decision"], "proceed");
    kernel.advance(LEASE - 20 * SECOND).unwrap();
    assert!(events_of(&kernel, &run.id, "dispatch.reclaimed").is_empty());
    // Still the live attempt, so nothing re-claimed it.
    assert_eq!(run.post("/heartbeat", "").await.0, 204);
    kernel.shutdown().await;
}

/// Go: TestApprovedAtMostOnceStepIsNotRerunAfterCrash (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn an_approved_at_most_once_step_is_not_rerun_after_a_crash() {
    let mut agent = FakeAgent::start().await;
    let kernel = manual(&agent.url, Some(APPROVAL_POLICY)).await;
    let write = json!({
        "kind": "tool_call", "target": "fs_write", "args": {"path": "/etc"},
        "idempotency": "at_most_once",
    });
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    let blocked = run.submit(write.clone()).await;
    assert_eq!(blocked["decision"], "blocked");
    let approval = blocked["approval_id"].as_str().unwrap();
    let grant = format!("{}/v0/approvals/{approval}/grant", kernel.url());
    let (status, body) = client("POST", &grant, None, Some(r#"{"decided_by":"alice"}"#)).await;
    assert!(status < 300, "{status} {body}");

    let resumed = Run::attach(&kernel, &mut agent, &run.id).await;
    assert_eq!(resumed.submit(write.clone()).await["decision"], "proceed");

    // No result recorded; the lease runs out and the dispatch comes back.
    kernel.advance(LEASE + SECOND).unwrap();
    let again = Run::attach(&kernel, &mut agent, &run.id).await;
    assert_eq!(again.attempt, resumed.attempt + 1);
    let replay = again.submit(write).await;
    assert_eq!(replay["decision"], "replay", "{replay}");
    assert!(
        replay["error"].to_string().contains("indeterminate"),
        "{replay}"
    );
    kernel.shutdown().await;
}

/// Go: TestSupersededSubmitIsRefusedAndLeavesCounterAlone (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn a_superseded_submit_is_refused_and_uses_no_occurrence() {
    let mut agent = FakeAgent::start().await;
    let kernel = manual(&agent.url, None).await;
    let stalled = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    let first = stalled.submit(read("/tmp")).await;
    let first_id = first["step_id"].as_str().unwrap();
    let recorded = stalled
        .complete(first_id, json!({"result": {"n": 1}}))
        .await;
    assert_eq!(recorded["decision"], "recorded");

    assert_eq!(kernel.redeliver(&stalled.id).unwrap(), 2);
    let live = Run::attach(&kernel, &mut agent, &stalled.id).await;

    // The live attempt replays the recorded call from occurrence zero.
    let replayed = live.submit(read("/tmp")).await;
    assert_eq!(replayed["decision"], "replay");
    assert_eq!(replayed["step_id"], first_id);
    // The stalled attempt's identical call is refused ...
    assert_superseded(stalled.post("/steps", &read("/tmp").to_string()).await);
    // ... and used no occurrence: the live attempt's next identical call is occurrence 1.
    let next = live.submit(read("/tmp")).await;
    assert_eq!(next["decision"], "proceed");
    let row = step(&live, next["step_id"].as_str().unwrap()).await;
    assert_eq!(row["occurrence"], 1);
    kernel.shutdown().await;
}

/// Go: TestSupersededHeartbeatIsRefused (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn a_superseded_heartbeat_is_refused_and_the_live_one_renews() {
    let mut agent = FakeAgent::start().await;
    let kernel = manual(&agent.url, None).await;
    let stalled = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    kernel.redeliver(&stalled.id).unwrap();
    let live = Run::attach(&kernel, &mut agent, &stalled.id).await;

    assert_superseded(stalled.post("/heartbeat", "").await);
    assert_eq!(live.post("/heartbeat", "").await.0, 204);
    kernel.shutdown().await;
}

/// Go: TestSupersededStepCompletionIsRefused (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn a_superseded_step_outcome_is_refused_and_leaves_the_step_executing() {
    let mut agent = FakeAgent::start().await;
    let kernel = manual(&agent.url, None).await;
    let stalled = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    let decision = stalled.submit(read("/tmp")).await;
    let step_id = decision["step_id"].as_str().unwrap();
    kernel.redeliver(&stalled.id).unwrap();
    let live = Run::attach(&kernel, &mut agent, &stalled.id).await;

    let complete = format!("/steps/{step_id}/complete");
    assert_superseded(
        stalled
            .post(&complete, r#"{"result":{"stale":true}}"#)
            .await,
    );
    assert_eq!(step(&live, step_id).await["status"], "executing");
    let fail = format!("/steps/{step_id}/fail");
    assert_superseded(stalled.post(&fail, r#"{"error":{"reason":"stale"}}"#).await);
    assert_eq!(step(&live, step_id).await["status"], "executing");
    kernel.shutdown().await;
}

/// Go: TestSupersededExecutionTerminalsAreRefused (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn a_superseded_attempt_cannot_end_the_execution() {
    let mut agent = FakeAgent::start().await;
    let kernel = manual(&agent.url, None).await;
    let stalled = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    kernel.redeliver(&stalled.id).unwrap();
    let live = Run::attach(&kernel, &mut agent, &stalled.id).await;

    assert_superseded(
        stalled
            .post("/complete", r#"{"output":{"stale":true}}"#)
            .await,
    );
    assert_superseded(stalled.post("/fail", r#"{"error":"stale"}"#).await);
    assert_eq!(execution(&kernel, &stalled.id).await["status"], "running");
    assert_eq!(
        live.post("/complete", r#"{"output":{"ok":true}}"#).await.0,
        204
    );
    assert_eq!(execution(&kernel, &stalled.id).await["status"], "completed");
    kernel.shutdown().await;
}

/// Go: TestCompletionAfterLeaseReleaseStillRecords (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn a_step_outcome_after_an_approval_retired_the_lease_still_records() {
    let mut agent = FakeAgent::start().await;
    let kernel = manual(&agent.url, Some(APPROVAL_POLICY)).await;
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    let proceed = run.submit(read("/tmp")).await;
    assert_eq!(proceed["decision"], "proceed");
    let blocked = run
        .submit(json!({"kind": "tool_call", "target": "fs_write", "args": {"path": "/etc"}}))
        .await;
    assert_eq!(blocked["decision"], "blocked");
    // The block retired the lease ...
    assert_superseded(run.post("/heartbeat", "").await);

    // ... yet this attempt still records the outcome of the step it ran.
    let step_id = proceed["step_id"].as_str().unwrap();
    let recorded = run.complete(step_id, json!({"result": {"n": 1}})).await;
    assert_eq!(recorded, json!({"decision": "recorded"}));
    assert_eq!(step(&run, step_id).await["status"], "succeeded");
    kernel.shutdown().await;
}

/// Go: TestReclaimedDispatchCannotStartNewWork (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn a_reclaimed_attempt_cannot_start_a_step() {
    let mut agent = FakeAgent::start().await;
    let kernel = manual(&agent.url, None).await;
    let stalled = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    kernel.advance(LEASE + SECOND).unwrap();
    assert_eq!(
        events_of(&kernel, &stalled.id, "dispatch.reclaimed").len(),
        1
    );

    assert_superseded(stalled.post("/steps", &read("/tmp").to_string()).await);
    assert!(kernel.steps(&stalled.id).is_empty());
    assert!(events_of(&kernel, &stalled.id, "step.proposed").is_empty());
    kernel.shutdown().await;
}

/// Go: TestReclaimedDispatchCannotResumeAnExecutingStep (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn a_reclaimed_attempt_cannot_resume_an_executing_step() {
    let mut agent = FakeAgent::start().await;
    let kernel = manual(&agent.url, None).await;
    let stalled = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    assert_eq!(stalled.submit(read("/tmp")).await["decision"], "proceed");
    kernel.advance(LEASE + SECOND).unwrap();
    assert_eq!(
        events_of(&kernel, &stalled.id, "dispatch.reclaimed").len(),
        1
    );

    let before = kernel.events(&stalled.id).len();
    assert_superseded(stalled.post("/steps", &read("/tmp").to_string()).await);
    let written: Vec<String> = kernel.events(&stalled.id)[before..]
        .iter()
        .map(|e| e.kind.clone())
        .filter(|k| k.starts_with("step."))
        .collect();
    assert!(written.is_empty(), "{written:?}");
    kernel.shutdown().await;
}

/// Go: TestReclaimedDispatchCannotRecordARateLimitRefusal (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn a_reclaimed_attempt_cannot_record_a_rate_limit_refusal() {
    let policy = r"
rules:
  - id: rate-limit-read
    when: { target: read }
    then:
      decision: allow
      rate_limit: { max_calls: 1, window: 1h, per_what: execution, max_wait: 1m }
";
    let mut agent = FakeAgent::start().await;
    let kernel = manual(&agent.url, Some(policy)).await;
    let stalled = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    assert_eq!(stalled.submit(read("/tmp")).await["decision"], "proceed");
    kernel.advance(LEASE + SECOND).unwrap();
    assert_eq!(
        events_of(&kernel, &stalled.id, "dispatch.reclaimed").len(),
        1
    );

    assert_superseded(stalled.post("/steps", &read("/other").to_string()).await);
    assert!(events_of(&kernel, &stalled.id, "step.rate_limited").is_empty());
    kernel.shutdown().await;
}

/// Go: TestLostAckOnTheFinalAttemptCannotFailAParkedExecution (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn a_lost_ack_on_the_last_attempt_leaves_a_blocked_execution_blocked() {
    let kernel = DevKernel::builder().max_attempts(1).start().await.unwrap();
    // The agent blocks its work on an approval, then its answer is lost (503).
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Value>();
    let base = kernel.url();
    let app = Router::new().route(
        "/webhook",
        post(move |body: Bytes| {
            let (base, done_tx) = (base.clone(), done_tx.clone());
            async move {
                let json: Value = serde_json::from_slice(&body).unwrap();
                let run = Run {
                    id: json["execution_id"].as_str().unwrap().to_owned(),
                    dispatch: json["dispatch_id"].as_str().unwrap().to_owned(),
                    attempt: u32::try_from(json["dispatch_attempt"].as_u64().unwrap()).unwrap(),
                    api: AgentClient::new(&base),
                };
                let write =
                    json!({"kind": "tool_call", "target": "fs_write", "args": {"path": "/etc"}});
                let _ = done_tx.send(run.submit(write).await);
                StatusCode::SERVICE_UNAVAILABLE
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/webhook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    kernel
        .register_agent(AgentSpec::new("hello", &url, SECRET).policy_yaml(APPROVAL_POLICY))
        .unwrap();

    let id = id_of(&create(&kernel, r#"{"agent_id":"hello"}"#).await);
    let decision = tokio::time::timeout(WAIT, done_rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(decision["decision"], "blocked", "{decision}");
    // The lost answer must not end the execution: it stays blocked on its approval.
    let ended = kernel
        .wait_until(&id, Duration::from_millis(300), |s| s.is_terminal())
        .await;
    assert!(ended.is_err(), "{ended:?}");
    assert_eq!(execution(&kernel, &id).await["status"], "blocked");
    let (_, pending) = client(
        "GET",
        &format!("{}/v0/approvals?status=pending", kernel.url()),
        None,
        None,
    )
    .await;
    let pending: Vec<&Value> = pending
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["execution_id"] == id)
        .collect();
    assert_eq!(pending.len(), 1);
    kernel.shutdown().await;
}

/// Go: TestDispatcherDeliveryAndRetry (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn a_refused_delivery_is_retried_and_every_attempt_is_signed() {
    let mut hook = Hook::start(&[StatusCode::SERVICE_UNAVAILABLE], 0).await;
    let kernel = retrying(&hook.url, 3).await;
    let id = id_of(&create(&kernel, r#"{"agent_id":"hello","input":{}}"#).await);
    assert_eq!(hook.next().await.attempt, 1);
    assert_eq!(hook.next().await.attempt, 2);
    acked(&kernel, &id, 1).await;

    assert!(hook.calls() >= 2);
    let signed = hook.shared.signed.lock().unwrap().clone();
    for (signature, body) in &signed {
        assert!(signature.starts_with("sha256="), "{signature}");
        assert!(verify_webhook(&Secret::new(SECRET), body, Some(signature.as_bytes())).is_ok());
        assert!(!String::from_utf8_lossy(body).contains("\"signature\""));
    }
    assert_eq!(execution(&kernel, &id).await["status"], "running");
    kernel.shutdown().await;
}

/// Go: TestDispatchTimeoutBoundsHungAgent (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn a_hung_webhook_is_cut_off_by_the_delivery_timeout() {
    // The agent never answers (its one call is held and never released).
    let mut hook = Hook::start(&[], 1).await;
    let kernel = DevKernel::builder()
        .max_attempts(1)
        .webhook_timeout(Duration::from_millis(50))
        .agent(AgentSpec::new("hello", &hook.url, SECRET))
        .start()
        .await
        .unwrap();
    let id = id_of(&create(&kernel, r#"{"agent_id":"hello"}"#).await);
    hook.next().await;
    let done = kernel
        .wait_terminal(&id, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(done.failure_reason, "dispatch_exhausted");
    let failed = events_of(&kernel, &id, "dispatch.failed");
    assert_eq!(failed[0].payload["error"], "timeout");
    kernel.shutdown().await;
}

/// Go: TestDispatchConcurrency (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn deliveries_of_different_executions_run_concurrently() {
    const N: usize = 6;
    // Every call waits until released: serial delivery would never see the sixth.
    let mut hook = Hook::start(&[], N).await;
    let kernel = retrying(&hook.url, 3).await;
    let mut ids = Vec::new();
    for _ in 0..N {
        ids.push(id_of(&create(&kernel, r#"{"agent_id":"hello"}"#).await));
    }
    for _ in 0..N {
        hook.next().await;
    }
    assert_eq!(hook.shared.peak.load(Ordering::SeqCst), N);
    hook.release();
    for id in ids {
        acked(&kernel, &id, 1).await;
    }
    kernel.shutdown().await;
}

/// Go: TestDispatchNeverExceedsConcurrency (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn deliveries_in_flight_never_exceed_the_worker_pool() {
    // Go's default pool (`kernel.DefaultConfig().DispatchConcurrency`).
    const POOL: usize = 8;
    const EXECUTIONS: usize = 5 * POOL;
    let mut hook = Hook::start(&[], EXECUTIONS).await;
    let kernel = retrying(&hook.url, 3).await;
    let mut ids = Vec::new();
    for _ in 0..EXECUTIONS {
        ids.push(id_of(&create(&kernel, r#"{"agent_id":"hello"}"#).await));
    }
    for _ in 0..POOL {
        hook.next().await;
    }
    // A full pool: nothing more may be in flight until a call returns.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(hook.calls() <= POOL, "{} calls in flight", hook.calls());
    hook.release();
    for id in ids {
        acked(&kernel, &id, 1).await;
    }
    assert!(hook.shared.peak.load(Ordering::SeqCst) <= POOL);
    kernel.shutdown().await;
}

/// Go: TestDispatchLoopClaimsWhileBusy (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn a_busy_delivery_does_not_hold_up_new_ones() {
    const LATER: usize = 5;
    let mut hook = Hook::start(&[], 1).await;
    let kernel = retrying(&hook.url, 3).await;
    let slow = id_of(&create(&kernel, r#"{"agent_id":"hello"}"#).await);
    assert_eq!(hook.next().await.execution_id, slow.to_string());

    let mut later = Vec::new();
    for _ in 0..LATER {
        later.push(id_of(&create(&kernel, r#"{"agent_id":"hello"}"#).await));
    }
    for id in &later {
        acked(&kernel, id, 1).await;
    }
    // All of them answered while the first delivery is still held.
    assert!(events_of(&kernel, &slow, "dispatch.acked").is_empty());
    assert_eq!(hook.shared.live.load(Ordering::SeqCst), 1);
    hook.release();
    acked(&kernel, &slow, 1).await;
    kernel.shutdown().await;
}

/// Go: TestReclaimDrainsStalledBacklog (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn one_sweep_reclaims_every_expired_lease() {
    const STRANDED: usize = 250;
    let mut agent = FakeAgent::start().await;
    let kernel = manual(&agent.url, None).await;
    let mut ids = Vec::new();
    for _ in 0..STRANDED {
        ids.push(id_of(&create(&kernel, r#"{"agent_id":"hello"}"#).await));
    }
    for _ in 0..STRANDED {
        assert_eq!(agent.next().await.attempt, 1);
    }

    // Every lease runs out at once; one sweep takes all of them back and delivers again.
    kernel.advance(LEASE + SECOND).unwrap();
    for id in &ids {
        assert_eq!(events_of(&kernel, id, "dispatch.reclaimed").len(), 1);
    }
    let mut again = HashMap::new();
    for _ in 0..STRANDED {
        let delivery = agent.next().await;
        assert_eq!(delivery.attempt, 2);
        again.insert(delivery.execution_id, delivery.attempt);
    }
    assert_eq!(again.len(), STRANDED);
    kernel.shutdown().await;
}

/// Go: TestReclaimedDispatchReplaysFromZero (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn a_reclaimed_dispatch_replays_recorded_steps_from_occurrence_zero() {
    let mut agent = FakeAgent::start().await;
    let kernel = manual(&agent.url, None).await;
    let crashed = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    let first = crashed.submit(read("/tmp")).await;
    let step_id = first["step_id"].as_str().unwrap();
    crashed.complete(step_id, json!({"result": {"n": 1}})).await;

    // The agent dies; its lease runs out and the same dispatch is delivered again.
    kernel.advance(LEASE + SECOND).unwrap();
    let resumed = Run::attach(&kernel, &mut agent, &crashed.id).await;
    assert_eq!(resumed.dispatch, crashed.dispatch);
    let replay = resumed.submit(read("/tmp")).await;
    assert_eq!(
        replay["decision"], "replay",
        "would re-run the effect: {replay}"
    );
    assert_eq!(replay["step_id"], step_id);
    assert_eq!(replay["result"], json!({"n": 1}));
    kernel.shutdown().await;
}

/// Go: TestDispatchAckedRecordsRealAttempt (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn dispatch_acked_names_the_attempt_that_succeeded() {
    let hook = Hook::start(&[StatusCode::SERVICE_UNAVAILABLE], 0).await;
    let kernel = retrying(&hook.url, 3).await;
    let id = id_of(&create(&kernel, r#"{"agent_id":"hello"}"#).await);
    kernel
        .wait_for_event(&id, EventKind::DispatchAcked, WAIT)
        .await
        .unwrap();

    let acked = events_of(&kernel, &id, "dispatch.acked");
    assert_eq!(acked.len(), 1);
    assert_eq!(acked[0].payload["attempt"], 2);
    let queued = events_of(&kernel, &id, "dispatch.queued");
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].payload["attempt"], 0);
    kernel.shutdown().await;
}

/// Go: TestReleasedDispatchRecordsNoEvent (internal/kernel/dispatch_test.go)
#[tokio::test]
async fn completing_the_execution_writes_no_dispatch_event() {
    let mut agent = FakeAgent::start().await;
    let kernel = manual(&agent.url, None).await;
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    acked(&kernel, &run.id, 1).await;
    assert_eq!(
        run.post("/complete", r#"{"output":{"ok":true}}"#).await.0,
        204
    );

    assert!(events_of(&kernel, &run.id, "dispatch.discarded").is_empty());
    assert_eq!(
        event_types(&kernel, &run.id).last().map(String::as_str),
        Some("execution.completed")
    );
    // The retired dispatch is not delivered again, so nothing follows later either.
    kernel.advance(Duration::from_secs(3600)).unwrap();
    assert!(agent.rx.try_recv().is_err());
    assert_eq!(
        event_types(&kernel, &run.id).last().map(String::as_str),
        Some("execution.completed")
    );
    kernel.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// concurrency_test.go (its "concurrency key" is today's `session`)
// ---------------------------------------------------------------------------------------

/// Collects `n` deliveries, by execution id.
async fn deliveries(agent: &mut FakeAgent, n: usize) -> HashMap<String, Delivery> {
    let mut out = HashMap::new();
    for _ in 0..n {
        let delivery = agent.next().await;
        out.insert(delivery.execution_id.clone(), delivery);
    }
    out
}

fn leased(kernel: &DevKernel, agent_id: &str, delivery: &Delivery) -> Run {
    let mut api = AgentClient::new(&kernel.url());
    api.agent_id = agent_id.to_owned();
    Run {
        id: delivery.execution_id.clone(),
        dispatch: delivery.dispatch_id.clone(),
        attempt: delivery.attempt,
        api,
    }
}

/// Go: TestConcurrencySerializesAcrossAgents (internal/kernel/concurrency_test.go)
#[tokio::test]
async fn a_session_runs_one_execution_at_a_time_across_agents() {
    let mut agent = FakeAgent::start().await;
    let kernel = manual(&agent.url, None).await;
    kernel
        .register_agent(AgentSpec::new("other", &agent.url, SECRET))
        .unwrap();
    let first = create(&kernel, r#"{"agent_id":"hello","session":"session-a"}"#).await;
    let second = create(&kernel, r#"{"agent_id":"other","session":"session-a"}"#).await;
    let third = create(&kernel, r#"{"agent_id":"hello","session":"session-a"}"#).await;
    let independent = create(&kernel, r#"{"agent_id":"hello","session":"session-b"}"#).await;
    assert_eq!(first["status"], "running");
    assert_eq!(second["status"], "pending");
    assert_eq!(third["status"], "pending");
    assert_eq!(independent["status"], "running");
    let (first, second, third) = (id_of(&first), id_of(&second), id_of(&third));
    let created = &kernel.events(&first)[0];
    assert_eq!(created.kind, "execution.created");
    assert_eq!(created.payload["session"], "session-a");

    let mut delivered = deliveries(&mut agent, 2).await;
    assert!(delivered.contains_key(&id_of(&independent)));
    for waiter in [&second, &third] {
        assert_eq!(execution(&kernel, waiter).await["status"], "pending");
        assert!(events_of(&kernel, waiter, "dispatch.queued").is_empty());
    }
    let url = format!("{}/v0/executions?session=session-a", kernel.url());
    let (_, page) = client("GET", &url, None, None).await;
    assert_eq!(page["executions"].as_array().unwrap().len(), 3);

    // Ending the running one admits the oldest waiter, whichever agent it belongs to.
    let run = leased(&kernel, "hello", &delivered.remove(&first).unwrap());
    assert_eq!(run.post("/complete", r#"{"output":{}}"#).await.0, 204);
    assert_eq!(execution(&kernel, &second).await["status"], "running");
    assert_eq!(execution(&kernel, &third).await["status"], "pending");
    let delivery = agent.next().await;
    assert_eq!(delivery.execution_id, second.to_string());
    let run = leased(&kernel, "other", &delivery);
    assert_eq!(run.post("/fail", r#"{"error":"failed"}"#).await.0, 204);
    assert_eq!(execution(&kernel, &third).await["status"], "running");
    assert_eq!(events_of(&kernel, &third, "execution.started").len(), 1);
    kernel.shutdown().await;
}

/// Go: TestConcurrencyRetainsOwnershipAcrossApproval (internal/kernel/concurrency_test.go)
#[tokio::test]
async fn a_blocked_execution_keeps_its_session_through_an_approval() {
    let mut agent = FakeAgent::start().await;
    let kernel = manual(&agent.url, Some(APPROVAL_POLICY)).await;
    let first = id_of(&create(&kernel, r#"{"agent_id":"hello","session":"session"}"#).await);
    let second = id_of(&create(&kernel, r#"{"agent_id":"hello","session":"session"}"#).await);
    let run = Run::attach(&kernel, &mut agent, &first).await;
    let blocked = run
        .submit(json!({"kind": "tool_call", "target": "fs_write", "args": {}}))
        .await;
    assert_eq!(blocked["decision"], "blocked");
    assert_eq!(execution(&kernel, &first).await["status"], "blocked");
    assert_eq!(execution(&kernel, &second).await["status"], "pending");

    let approval = blocked["approval_id"].as_str().unwrap();
    let grant = format!("{}/v0/approvals/{approval}/grant", kernel.url());
    let (status, body) = client("POST", &grant, None, Some(r#"{"decided_by":"test"}"#)).await;
    assert!(status < 300, "{status} {body}");
    Run::attach(&kernel, &mut agent, &first).await;
    assert_eq!(execution(&kernel, &second).await["status"], "pending");

    let cancel = format!("{}/v0/executions/{first}/cancel", kernel.url());
    assert!(client("POST", &cancel, None, None).await.0 < 300);
    assert_eq!(execution(&kernel, &second).await["status"], "running");
    kernel.shutdown().await;
}

/// Go: TestConcurrencyCancellationAndDeadlines (internal/kernel/concurrency_test.go)
#[tokio::test]
async fn cancelling_and_deadlines_release_a_session_in_order() {
    let agent = FakeAgent::start().await;
    let kernel = DevKernel::builder()
        .manual_clock()
        .execution_deadline(Duration::from_secs(60))
        .agent(AgentSpec::new("hello", &agent.url, SECRET))
        .start()
        .await
        .unwrap();
    let body = r#"{"agent_id":"hello","session":"session"}"#;
    let first = id_of(&create(&kernel, body).await);
    let cancelled = id_of(&create(&kernel, body).await);
    kernel.advance(10 * SECOND).unwrap();
    let expired = id_of(&create(&kernel, body).await);
    kernel.advance(40 * SECOND).unwrap();
    let next = id_of(&create(&kernel, body).await);

    // Cancelling a waiter leaves the running execution alone.
    let cancel = format!("{}/v0/executions/{cancelled}/cancel", kernel.url());
    assert!(client("POST", &cancel, None, None).await.0 < 300);
    assert_eq!(execution(&kernel, &first).await["status"], "running");

    // Past the deadlines of `first` and `expired` (not `next`'s): the overdue waiter is
    // cancelled without ever being started, and the session passes to `next`.
    kernel.advance(25 * SECOND).unwrap();
    kernel
        .wait_until(&next, WAIT, |s| s == ExecutionStatus::Running)
        .await
        .unwrap();
    let got = execution(&kernel, &expired).await;
    assert_eq!(got["status"], "cancelled");
    assert_eq!(got["failure_reason"], "deadline_exceeded");
    assert!(events_of(&kernel, &expired, "dispatch.queued").is_empty());
    assert!(events_of(&kernel, &expired, "execution.started").is_empty());
    assert_eq!(execution(&kernel, &first).await["status"], "cancelled");
    kernel.shutdown().await;
}

/// Go: TestConcurrencyAdmissionAcrossReplicas (internal/kernel/concurrency_test.go)
#[tokio::test]
async fn concurrent_creates_in_one_session_start_exactly_one() {
    const COUNT: usize = 12;
    let mut agent = FakeAgent::start().await;
    let kernel = manual(&agent.url, None).await;
    let mut tasks = Vec::new();
    for _ in 0..COUNT {
        let url = format!("{}/v0/executions", kernel.url());
        tasks.push(tokio::spawn(async move {
            let body = r#"{"agent_id":"hello","session":"session"}"#;
            client("POST", &url, None, Some(body)).await
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap().0, 201);
    }
    let url = format!("{}/v0/executions?session=session", kernel.url());
    let (_, page) = client("GET", &url, None, None).await;
    let page = page["executions"].as_array().unwrap();
    assert_eq!(page.len(), COUNT);
    let running: Vec<&Value> = page.iter().filter(|e| e["status"] == "running").collect();
    assert_eq!(running.len(), 1, "{page:?}");
    let running = running[0]["id"].as_str().unwrap().to_owned();
    let delivery = agent.next().await;
    assert_eq!(
        (delivery.execution_id, delivery.attempt),
        (running.to_string(), 1)
    );
    assert_eq!(events_of(&kernel, &running, "dispatch.queued").len(), 1);
    for e in page {
        let id = e["id"].as_str().unwrap().to_owned();
        if id != running {
            assert!(events_of(&kernel, &id, "dispatch.queued").is_empty());
        }
    }
    kernel.shutdown().await;
}

/// Go: TestConcurrencyRetentionPreservesNonterminalExecutions (internal/kernel/concurrency_test.go)
#[tokio::test]
async fn retention_deletes_only_terminal_executions() {
    let mut agent = FakeAgent::start().await;
    let policy = r"
rules:
  - id: gate
    when: { target: fs_write }
    then:
      decision: require_approval
      approval_config: { timeout: 720h }
";
    let kernel = manual(&agent.url, Some(policy)).await;
    let mut by_status: Vec<(&str, String)> = Vec::new();
    for ending in ["completed", "failed", "cancelled", "running", "blocked"] {
        let session = format!(r#"{{"agent_id":"hello","session":"{ending}"}}"#);
        let run = Run::start(&kernel, &mut agent, &session).await;
        match ending {
            "completed" => assert_eq!(run.post("/complete", r#"{"output":1}"#).await.0, 204),
            "failed" => assert_eq!(run.post("/fail", r#"{"error":"boom"}"#).await.0, 204),
            "cancelled" => kernel.cancel(&run.id).unwrap(),
            "blocked" => {
                let write = json!({"kind": "tool_call", "target": "fs_write", "args": {}});
                assert_eq!(run.submit(write).await["decision"], "blocked");
            }
            _ => {}
        }
        by_status.push((ending, run.id));
    }
    // A waiter queued behind the blocked execution's session.
    let waiter = create(&kernel, r#"{"agent_id":"hello","session":"blocked"}"#).await;
    assert_eq!(waiter["status"], "pending");
    by_status.push(("pending", id_of(&waiter)));

    // Two days on, a cleanup pass has run (every 10 minutes by default).
    kernel.advance(Duration::from_secs(48 * 3600)).unwrap();
    kernel.advance(Duration::from_secs(3600)).unwrap();
    for (status, id) in by_status {
        let url = format!("{}/v0/executions/{id}", kernel.url());
        let (code, body) = client("GET", &url, None, None).await;
        if matches!(status, "completed" | "failed" | "cancelled") {
            assert_eq!(code, 404, "{status} retained: {body}");
        } else {
            assert_eq!(code, 200, "{status} deleted");
        }
    }
    kernel.shutdown().await;
}

/// Dev kernel, after the Go dispatcher (`runDispatches` claims no more dispatches than it has
/// idle workers): a dispatch waiting for a worker has used no attempt and holds no lease, so
/// no time spent waiting can expire it; it is claimed, as attempt 1, when a worker frees up.
#[tokio::test]
async fn a_dispatch_waiting_for_a_worker_uses_no_attempt_and_holds_no_lease() {
    let mut hook = Hook::start(&[], 1).await;
    let kernel = DevKernel::builder()
        .manual_clock()
        .dispatch_concurrency(1)
        .agent(AgentSpec::new("hello", &hook.url, SECRET))
        .start()
        .await
        .unwrap();
    let busy = id_of(&create(&kernel, r#"{"agent_id":"hello"}"#).await);
    assert_eq!(hook.next().await.execution_id, busy.to_string());
    let waiting = id_of(&create(&kernel, r#"{"agent_id":"hello"}"#).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(hook.calls(), 1, "the one worker is busy");

    // Past a whole lease: the busy attempt's lease ran out, the waiting dispatch had none.
    kernel.advance(LEASE + SECOND).unwrap();
    assert_eq!(events_of(&kernel, &busy, "dispatch.reclaimed").len(), 1);
    assert!(events_of(&kernel, &waiting, "dispatch.reclaimed").is_empty());
    hook.release();
    let mut attempts = HashMap::new();
    for _ in 0..2 {
        let delivery = hook.next().await;
        attempts.insert(delivery.execution_id, delivery.attempt);
    }
    assert_eq!(attempts[&waiting], 1);
    assert_eq!(attempts[&busy], 2);
    acked(&kernel, &waiting, 1).await;
    assert_eq!(hook.shared.peak.load(Ordering::SeqCst), 1);
    kernel.shutdown().await;
}

/// Dev kernel, after the Go kernel's cleanup of sessions (its Postgres
/// `DeleteExecutionsCreatedBefore`): an old ended execution stays while its session has a
/// younger one; the session goes as a whole once all of it is old and ended.
#[tokio::test]
async fn retention_deletes_a_session_only_as_a_whole() {
    const HOUR: Duration = Duration::from_secs(3600);
    let mut agent = FakeAgent::start().await;
    let kernel = manual(&agent.url, None).await;
    let old = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello","session":"s"}"#).await;
    assert_eq!(old.post("/complete", r#"{"output":1}"#).await.0, 204);
    let alone = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    assert_eq!(alone.post("/complete", r#"{"output":1}"#).await.0, 204);
    kernel.advance(20 * HOUR).unwrap();
    let young = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello","session":"s"}"#).await;
    assert_eq!(young.post("/complete", r#"{"output":2}"#).await.0, 204);

    // 30 h on: `old` is past retention, but its session has `young` (10 h old).
    kernel.advance(10 * HOUR).unwrap();
    assert!(kernel.execution(&alone.id).is_none());
    assert!(kernel.execution(&old.id).is_some());
    // 50 h on: both are past it, and the session is gone.
    kernel.advance(20 * HOUR).unwrap();
    assert!(kernel.execution(&old.id).is_none());
    assert!(kernel.execution(&young.id).is_none());
    let url = format!("{}/v0/executions?session=s", kernel.url());
    let (_, page) = client("GET", &url, None, None).await;
    assert_eq!(page["executions"], json!([]), "{page}");
    kernel.shutdown().await;
}

/// Dev kernel: retention can be turned off (`Duration::ZERO`, as Go's `retain <= 0`).
#[tokio::test]
async fn retention_zero_keeps_every_execution() {
    let mut agent = FakeAgent::start().await;
    let kernel = DevKernel::builder()
        .manual_clock()
        .execution_retention(Duration::ZERO)
        .agent(AgentSpec::new("hello", &agent.url, SECRET))
        .start()
        .await
        .unwrap();
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    assert_eq!(run.post("/complete", r#"{"output":1}"#).await.0, 204);
    kernel.advance(Duration::from_secs(30 * 24 * 3600)).unwrap();
    assert!(kernel.execution(&run.id).is_some());
    kernel.shutdown().await;
}

/// Dev kernel: with `--data-dir`, what retention deleted stays deleted after a restart (the
/// restarted kernel keeps everything itself, so only the record of the deletion can decide),
/// and the event log no longer holds it.
#[tokio::test]
async fn a_deleted_execution_stays_deleted_after_a_restart() {
    let dir = std::env::temp_dir().join(format!("rebuno-retention-{}", Uuid::now_v7()));
    let mut agent = FakeAgent::start().await;
    let kernel = DevKernel::builder()
        .manual_clock()
        .data_dir(&dir)
        .agent(AgentSpec::new("hello", &agent.url, SECRET))
        .start()
        .await
        .unwrap();
    let gone = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    assert_eq!(gone.post("/complete", r#"{"output":1}"#).await.0, 204);
    kernel.advance(Duration::from_secs(48 * 3600)).unwrap();
    assert!(kernel.execution(&gone.id).is_none());
    let kept = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    assert_eq!(kept.post("/complete", r#"{"output":2}"#).await.0, 204);
    kernel.shutdown().await;

    let kernel = DevKernel::builder()
        .execution_retention(Duration::ZERO)
        .data_dir(&dir)
        .start()
        .await
        .unwrap();
    assert!(kernel.execution(&gone.id).is_none());
    assert!(kernel.execution(&kept.id).is_some());
    let url = format!("{}/v0/executions/{}", kernel.url(), gone.id);
    assert_eq!(client("GET", &url, None, None).await.0, 404);
    let log = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    assert!(!log.contains(&gone.id));
    assert!(log.contains(&kept.id));
    kernel.shutdown().await;
    std::fs::remove_dir_all(dir).unwrap();
}
