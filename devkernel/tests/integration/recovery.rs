//! Recovery from a `--data-dir` log: regressions found by trying to break it (a torn batch,
//! a grant cut short, an overdue approval at restart, literals the parser normalizes, a
//! reconfigured resource under a fork, a deadline past year 9999).

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{FakeAgent, Run, SECRET, events_of, kernel_with_agent};
use rebuno::wire::ExecutionStatus;
use rebuno_devkernel::{AgentSpec, DevKernel};
use serde_json::json;

fn data_dir() -> PathBuf {
    std::env::temp_dir().join(format!("rebuno-review-{}", uuid::Uuid::now_v7()))
}

async fn kernel_at(dir: &Path, agent: &FakeAgent, policy: Option<&str>) -> DevKernel {
    let mut spec = AgentSpec::new("hello", &agent.url, SECRET);
    if let Some(p) = policy {
        spec = spec.policy_yaml(p);
    }
    DevKernel::builder()
        .data_dir(dir)
        .agent(spec)
        .start()
        .await
        .unwrap()
}

/// Cuts the journal inside the batch (line) holding `needle`, just after it: a crash in the
/// middle of that batch's write.
fn tear_within(dir: &Path, needle: &str) {
    let path = dir.join("events.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let at = text.find(needle).expect("needle in the journal") + needle.len();
    std::fs::write(&path, &text[..at]).unwrap();
}

#[tokio::test]
async fn re_registering_and_re_binding_normalized_literals_is_a_no_op() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    let body = r#"{"key":"w","driver_id":"fs","configuration":{"ratio":0.50,"n":1e3}}"#;
    let (first, _) = run.post("/resources", body).await;
    let (second, err) = run.post("/resources", body).await;
    let bind = r#"{"binding":{"x":1.50}}"#;
    let (b1, _) = run.post("/resources/w/binding", bind).await;
    let (b2, berr) = run.post("/resources/w/binding", bind).await;
    assert_eq!(
        (first, second, b1, b2),
        (200, 200, 204, 204),
        "{err} {berr}"
    );
}

/// A re-registration keeps the first policy (Go:
/// TestRepeatedRegistrationKeepsItsPolicyAndRefusesAnotherDriverOrCapability), and a fork
/// copies that policy.
#[tokio::test]
async fn a_fork_keeps_the_first_checkpoint_interval() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    let reg = |n: i64| json!({"key":"w","driver_id":"fs","every_steps":n}).to_string();
    assert_eq!(run.post("/resources", &reg(3)).await.0, 200);
    let (_, view) = run.post("/resources", &reg(1)).await;
    assert_eq!(view["every_steps"], 3);
    let at = kernel.events(&run.id).len() as u64;
    let fork = kernel.fork(&run.id, at).unwrap();
    let forked = kernel.resources(&fork.id);
    assert_eq!(forked[0].every_steps, 3);
}

const DENY_RM: &str =
    "rules:\n  - id: no-rm\n    when: { target: rm }\n    then: { decision: deny }\n";

#[tokio::test]
async fn a_batch_torn_by_a_crash_is_dropped_whole_and_policy_decides_again() {
    let dir = data_dir();
    let mut agent = FakeAgent::start().await;
    let kernel = kernel_at(&dir, &agent, Some(DENY_RM)).await;
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    let step = json!({"kind":"tool_call","target":"rm","args":{"p":"/"}});
    let first = run.submit(step.clone()).await;
    assert_eq!(first["decision"], "denied");
    kernel.shutdown().await;
    // Killed while writing the batch: step.proposed made it, step.denied did not.
    tear_within(&dir, r#""type":"step.proposed""#);
    let kernel = kernel_at(&dir, &agent, Some(DENY_RM)).await;
    let run = Run::attach(&kernel, &mut agent, &run.id).await;
    assert!(events_of(&kernel, &run.id, "step.proposed").is_empty());
    let again = run.submit(step).await;
    assert_eq!(again["decision"], "denied", "{again}");
    kernel.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

const GATE: &str =
    "rules:\n  - id: gate\n    when: { target: send }\n    then: { decision: require_approval }\n";

#[tokio::test]
async fn a_grant_torn_by_a_crash_leaves_the_approval_pending_and_grantable() {
    let dir = data_dir();
    let mut agent = FakeAgent::start().await;
    let kernel = kernel_at(&dir, &agent, Some(GATE)).await;
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    let blocked = run
        .submit(json!({"kind":"tool_call","target":"send","args":{}}))
        .await;
    let approval = blocked["approval_id"].as_str().unwrap().to_owned();
    kernel.grant(&approval).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    kernel.shutdown().await;
    while agent.rx.try_recv().is_ok() {}
    // Killed while writing the grant's batch (approval.granted, step.allowed, resumed).
    tear_within(&dir, r#""type":"step.allowed""#);
    let kernel = kernel_at(&dir, &agent, Some(GATE)).await;
    assert_eq!(
        kernel.execution(&run.id).unwrap().status,
        ExecutionStatus::Blocked
    );
    assert_eq!(kernel.approvals().len(), 1, "the grant never happened");
    kernel.grant(&approval).unwrap();
    let resumed = Run::attach(&kernel, &mut agent, &run.id).await;
    let step = json!({"kind":"tool_call","target":"send","args":{}});
    assert_eq!(resumed.submit(step).await["decision"], "proceed");
    kernel.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn an_approval_deadline_past_year_9999_still_reads_back() {
    let dir = data_dir();
    let mut agent = FakeAgent::start().await;
    let policy = "rules:\n  - id: gate\n    when: { target: send }\n    then: { decision: require_approval, approval_config: { timeout: 100000000h } }\n";
    let kernel = kernel_at(&dir, &agent, Some(policy)).await;
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    run.submit(json!({"kind":"tool_call","target":"send","args":{}}))
        .await;
    kernel.shutdown().await;
    let restarted = DevKernel::builder()
        .data_dir(&dir)
        .agent(AgentSpec::new("hello", &agent.url, SECRET).policy_yaml(policy))
        .start()
        .await;
    assert!(restarted.is_ok(), "{:?}", restarted.err());
    restarted.unwrap().shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_rebuilt_execution_has_the_live_resources_and_steps() {
    let dir = data_dir();
    let mut agent = FakeAgent::start().await;
    let kernel = kernel_at(&dir, &agent, None).await;
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    let reg = json!({"key":"w","driver_id":"fs","configuration":null,"every_steps":1}).to_string();
    assert_eq!(run.post("/resources", &reg).await.0, 200);
    let live = kernel.resources(&run.id);
    let steps_live = kernel.steps(&run.id);
    kernel.shutdown().await;
    let kernel = kernel_at(&dir, &agent, None).await;
    let rebuilt = kernel.resources(&run.id);
    assert_eq!(kernel.steps(&run.id), steps_live);
    assert_eq!(
        serde_json::to_value(&live).unwrap(),
        serde_json::to_value(&rebuilt).unwrap()
    );
    kernel.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_approval_overdue_at_restart_gets_one_live_dispatch() {
    let policy = "rules:\n  - id: gate\n    when: { target: send }\n    then: { decision: require_approval, approval_config: { timeout: 100ms } }\n";
    let mut doubled = 0;
    for round in 0..3 {
        let dir = data_dir();
        let mut agent = FakeAgent::start().await;
        let kernel = kernel_at(&dir, &agent, Some(policy)).await;
        let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
        run.submit(json!({"kind":"tool_call","target":"send","args":{}}))
            .await;
        kernel.shutdown().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        while agent.rx.try_recv().is_ok() {}
        let kernel = kernel_at(&dir, &agent, Some(policy)).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut dispatches = std::collections::BTreeSet::new();
        while let Ok(d) = agent.rx.try_recv() {
            dispatches.insert(d.dispatch_id);
        }
        let types: Vec<String> = kernel
            .events(&run.id)
            .iter()
            .map(|e| e.kind.clone())
            .collect();
        if dispatches.len() > 1 {
            doubled += 1;
            eprintln!(
                "round {round}: {} dispatches delivered: {types:?}",
                dispatches.len()
            );
        }
        kernel.shutdown().await;
        let _ = std::fs::remove_dir_all(dir);
    }
    assert_eq!(doubled, 0);
}
