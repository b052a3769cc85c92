//! Leases outlive a SIGKILLed `rebuno-dev --data-dir`, as the Go kernel's do (rows with an
//! expiry in Postgres): the agent that holds a live lease heartbeats on, settles its step and
//! completes after the restart, with the occurrence counts of its attempt intact; a lease that
//! ran out while the kernel was down is reclaimed (`lease_expired`) and the same dispatch is
//! delivered again, so its `at_most_once` orphan comes back `indeterminate`.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{AgentClient, FakeAgent, Run, SECRET, client};
use crate::restart::{events, free_port, kill, spawn_rebuno_dev, wait_ready};

/// A data directory and a manifest registering the fake agent as `hello`.
fn setup(webhook: &str, lease_seconds: u64) -> (PathBuf, PathBuf) {
    let root = std::env::temp_dir().join(format!("rebuno-leases-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&root).unwrap();
    let manifest = root.join("agents.yaml");
    let yaml = format!(
        "agents:\n  - id: hello\n    webhook_url: {webhook}\n    secret: {SECRET}\n    \
         lease_timeout_seconds: {lease_seconds}\n"
    );
    std::fs::write(&manifest, yaml).unwrap();
    (root.join("data"), manifest)
}

/// Creates an execution of `hello` on the kernel at `url` and takes its first delivery.
async fn start(url: &str, agent: &mut FakeAgent) -> Run {
    let body = r#"{"agent_id":"hello","input":{}}"#;
    let (status, created) = client("POST", &format!("{url}/v0/executions"), None, Some(body)).await;
    assert_eq!(status, 201, "{created}");
    let delivery = agent.next().await;
    Run {
        id: created["id"].as_str().unwrap().to_owned(),
        dispatch: delivery.dispatch_id,
        attempt: delivery.attempt,
        api: AgentClient::new(url),
    }
}

/// The shortest lease an agent can ask for (the dev kernel's floor, as the Go kernel's).
const LEASE_SECONDS: u64 = 10;

fn pay() -> Value {
    json!({"kind": "tool_call", "target": "pay", "args": {"n": 1}, "idempotency": "at_most_once"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_lease_survives_a_restart_and_its_holder_completes() {
    let mut agent = FakeAgent::start().await;
    let (data, manifest) = setup(&agent.url, 60);
    let addr = free_port();
    let url = format!("http://{addr}");
    let mut kernel = spawn_rebuno_dev(addr, &data, Some(&manifest));
    wait_ready(&url).await;
    let run = start(&url, &mut agent).await;
    let first = run.submit(pay()).await;
    run.complete(first["step_id"].as_str().unwrap(), json!({"result": 1}))
        .await;
    let second = run.submit(pay()).await; // occurrence 1, left executing
    assert_eq!(second["decision"], "proceed");

    kill(&mut kernel);
    let mut kernel = spawn_rebuno_dev(addr, &data, Some(&manifest));
    wait_ready(&url).await;

    let (status, beat) = run.post("/heartbeat", "").await;
    assert!(status < 300, "heartbeat after the restart: {status} {beat}");
    let settled = run
        .complete(second["step_id"].as_str().unwrap(), json!({"result": 2}))
        .await;
    assert_eq!(settled["decision"], "recorded", "{settled}");
    // The attempt's occurrence counts came back: a third identical call is a new step.
    let third = run.submit(pay()).await;
    assert_eq!(third["decision"], "proceed", "{third}");
    let ids = [&first, &second, &third].map(|d| d["step_id"].as_str().unwrap().to_owned());
    assert!(ids[2] != ids[0] && ids[2] != ids[1], "{ids:?}");
    run.complete(&ids[2], json!({"result": 3})).await;
    let (status, done) = run.post("/complete", r#"{"output":"ok"}"#).await;
    assert!(status < 300, "{status} {done}");

    let log = events(&url, &run.id).await;
    let kinds: Vec<&str> = log.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert!(!kinds.contains(&"dispatch.reclaimed"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"execution.completed"), "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "step.succeeded").count(), 3);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), agent.rx.recv())
            .await
            .is_err(),
        "delivered again"
    );
    kill(&mut kernel);
    let _ = std::fs::remove_dir_all(data.parent().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_ran_out_while_the_kernel_was_down_is_reclaimed() {
    let mut agent = FakeAgent::start().await;
    let (data, manifest) = setup(&agent.url, LEASE_SECONDS);
    let addr = free_port();
    let url = format!("http://{addr}");
    let mut kernel = spawn_rebuno_dev(addr, &data, Some(&manifest));
    wait_ready(&url).await;
    let run = start(&url, &mut agent).await;
    let orphan = run.submit(pay()).await;
    assert_eq!(orphan["decision"], "proceed");

    kill(&mut kernel);
    tokio::time::sleep(Duration::from_secs(LEASE_SECONDS) + Duration::from_millis(500)).await;
    let mut kernel = spawn_rebuno_dev(addr, &data, Some(&manifest));
    wait_ready(&url).await;

    // The same dispatch comes again, under the next attempt.
    let again = agent.next().await;
    assert_eq!(again.dispatch_id, run.dispatch);
    assert_eq!(again.attempt, run.attempt + 1);
    let (status, _) = run.post("/heartbeat", "").await;
    assert_eq!(status, 409, "the old attempt is superseded");
    let rerun = Run {
        attempt: again.attempt,
        ..run
    };
    let replay = rerun.submit(pay()).await;
    assert_eq!(replay["decision"], "replay", "{replay}");
    assert_eq!(replay["error"]["reason"], "indeterminate");

    let log = events(&url, &rerun.id).await;
    let reclaims: Vec<&Value> = log
        .iter()
        .filter(|e| e["type"] == "dispatch.reclaimed")
        .collect();
    assert_eq!(reclaims.len(), 1, "{log:?}");
    assert_eq!(reclaims[0]["payload"]["error"], "lease_expired");
    kill(&mut kernel);
    let _ = std::fs::remove_dir_all(data.parent().unwrap());
}
