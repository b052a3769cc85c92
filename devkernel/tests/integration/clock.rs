//! The manual clock: an hour-long approval timeout, a lease reclaim and a delivery backoff,
//! each driven by `DevKernel::advance` in milliseconds of real time.

use std::time::Duration;

use axum::http::StatusCode;
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::json;

use crate::common::time::Timestamp;
use crate::common::{FakeAgent, Run, SECRET, event_types, events_of};

const HOUR: Duration = Duration::from_secs(3600);

async fn manual_kernel(agent: &FakeAgent, policy: Option<&str>) -> DevKernel {
    let mut spec = AgentSpec::new("hello", &agent.url, SECRET);
    if let Some(yaml) = policy {
        spec = spec.policy_yaml(yaml);
    }
    DevKernel::builder()
        .manual_clock()
        .approval_timeout(HOUR)
        .agent(spec)
        .start()
        .await
        .unwrap()
}

/// Polls (in real time) until the execution's log holds an event of `kind`.
async fn wait_for(kernel: &DevKernel, id: &str, kind: &str) {
    for _ in 0..500 {
        if event_types(kernel, id).iter().any(|k| k == kind) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no {kind} in {:?}", event_types(kernel, id));
}

#[tokio::test]
async fn an_hour_long_approval_expires_when_the_clock_passes_it_and_not_before() {
    let mut agent = FakeAgent::start().await;
    let gate = "rules:\n  - id: gate\n    when: { step_kind: tool_call }\n    then: { decision: require_approval }\n";
    let kernel = manual_kernel(&agent, Some(gate)).await;
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    let step = json!({"kind": "tool_call", "target": "transfer", "args": {"amount": 5}});
    assert_eq!(run.submit(step.clone()).await["decision"], "blocked");

    kernel.advance(HOUR - Duration::from_secs(1)).unwrap();
    assert_eq!(kernel.approvals().len(), 1, "a second before the deadline");
    assert!(events_of(&kernel, &run.id, "approval.expired").is_empty());

    kernel.advance(Duration::from_secs(2)).unwrap();
    assert!(kernel.approvals().is_empty());
    let expired = &events_of(&kernel, &run.id, "approval.expired")[0];
    assert_eq!(expired.payload["rationale"], "timeout");
    // The expiry is stamped with the kernel's time: an hour after the request.
    let requested = &events_of(&kernel, &run.id, "approval.requested")[0];
    let at = |text: &str| Timestamp::parse(text).unwrap().unix_nanos();
    let waited = at(&expired.occurred_at) - at(&requested.occurred_at);
    assert!(waited >= HOUR.as_nanos() as i128, "{waited}");

    let resumed = Run::attach(&kernel, &mut agent, &run.id).await;
    assert_eq!(resumed.submit(step).await["reason"], "approval_timeout");
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_lease_the_agent_lets_expire_is_reclaimed_visibly_and_delivered_again() {
    let mut agent = FakeAgent::start().await;
    let kernel = manual_kernel(&agent, None).await;
    let silent = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    wait_for(&kernel, &silent.id, "dispatch.acked").await;

    // The default lease is 120 s: nothing happens before it runs out.
    kernel.advance(Duration::from_secs(119)).unwrap();
    assert!(events_of(&kernel, &silent.id, "dispatch.reclaimed").is_empty());
    kernel.advance(Duration::from_secs(2)).unwrap();
    let reclaimed = &events_of(&kernel, &silent.id, "dispatch.reclaimed")[0];
    assert_eq!(reclaimed.payload["error"], "lease_expired");
    assert_eq!(reclaimed.payload["attempt"], 1);

    let again = Run::attach(&kernel, &mut agent, &silent.id).await;
    assert_eq!(again.attempt, 2);
    let (status, stale) = silent.post("/heartbeat", "").await;
    assert_eq!(status, 409, "{stale}");
    assert_eq!(again.post("/complete", r#"{"output":1}"#).await.0, 204);
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_refusing_agent_is_retried_on_the_clock_and_the_failure_names_its_last_answer() {
    let agent = FakeAgent::start_with(StatusCode::UNAUTHORIZED).await;
    let (kernel, created) = delivering_to(&agent.url, 3).await;
    wait_for(&kernel, &created.id, "dispatch.failed").await;
    // A minute of backoff passes in no real time; then two minutes.
    kernel.advance(Duration::from_secs(76)).unwrap();
    wait_for_count(&kernel, &created.id, "dispatch.failed", 2).await;
    kernel.advance(Duration::from_secs(151)).unwrap();
    wait_for(&kernel, &created.id, "execution.failed").await;

    let failed = events_of(&kernel, &created.id, "dispatch.failed");
    assert_eq!(failed.len(), 3);
    for (attempt, event) in (1..).zip(&failed) {
        assert_eq!(event.payload["attempt"], attempt);
        assert_eq!(event.payload["http_status"], 401);
        assert_eq!(event.payload["error"], "http_status");
    }
    assert_eq!(failed[2].payload["status"], "exhausted");
    let ended = &events_of(&kernel, &created.id, "execution.failed")[0];
    assert_eq!(ended.payload["reason"], "dispatch_exhausted");
    assert_eq!(
        ended.payload["last_delivery"],
        json!({"attempt": 3, "http_status": 401, "error": "http_status"})
    );
    kernel.shutdown().await;
}

/// A manual-clock kernel delivering one new execution to `url`, `attempts` times at most,
/// a minute of backoff doubling.
async fn delivering_to(url: &str, attempts: u32) -> (DevKernel, rebuno::wire::Execution) {
    let kernel = DevKernel::builder()
        .manual_clock()
        .max_attempts(attempts)
        .retry_backoff(Duration::from_secs(60), Duration::from_secs(600))
        .agent(AgentSpec::new("hello", url, SECRET))
        .start()
        .await
        .unwrap();
    let created = kernel
        .create_execution(NewExecution::new("hello", json!({})))
        .await
        .unwrap();
    (kernel, created)
}

async fn wait_for_count(kernel: &DevKernel, id: &str, kind: &str, count: usize) {
    for _ in 0..500 {
        if events_of(kernel, id, kind).len() >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("fewer than {count} {kind} in {:?}", event_types(kernel, id));
}

#[tokio::test]
async fn advancing_a_kernel_on_real_time_is_an_error() {
    let kernel = DevKernel::start().await.unwrap();
    assert!(kernel.advance(HOUR).is_err());
    kernel.shutdown().await;
}

#[tokio::test]
async fn an_agent_that_never_answers_is_recorded_as_a_transport_failure() {
    // A port nobody listens on: every attempt is a connect error.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/webhook", closed.local_addr().unwrap());
    drop(closed);
    let (kernel, created) = delivering_to(&url, 1).await;
    wait_for(&kernel, &created.id, "execution.failed").await;
    let failed = &events_of(&kernel, &created.id, "dispatch.failed")[0];
    assert_eq!(failed.payload["error"], "connect");
    assert!(failed.payload.get("http_status").is_none());
    kernel.shutdown().await;
}
