//! Forks and fork points over HTTP (PROTOCOL.md §1.8, §2.5).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Run, client, event_types, events_of, kernel_with_agent};
use rebuno::wire::ExecutionStatus;
use rebuno_devkernel::identity;
use serde_json::{Value, json};
use uuid::Uuid;

fn tool(target: &str, resources: &[&str]) -> Value {
    json!({"kind": "tool_call", "target": target, "args": {"t": target}, "resources": resources})
}

const WORKSPACE: &str =
    r#"{"key":"workspace","driver_id":"fs","coverage_reuse":true,"every_steps":1}"#;

/// Source: register + bind + baseline c0; step A (declared, capture c1); step B; step C
/// declared and left executing. Returns the run and the seq of B's `step.succeeded`.
async fn source(kernel: &rebuno_devkernel::DevKernel, agent: &mut common::FakeAgent) -> (Run, u64) {
    let run = Run::start(kernel, agent, r#"{"agent_id":"hello","input":{"n":1}}"#).await;
    run.post("/resources", WORKSPACE).await;
    run.post("/resources/workspace/binding", r#"{"binding":"b"}"#)
        .await;
    let baseline = r#"{"captures":[{"key":"workspace","generation":0,"checkpoint_ref":"c0"}]}"#;
    run.post("/resources/checkpoints", baseline).await;
    let a = run.submit(tool("a", &["workspace"])).await;
    let capture = json!({"result": "A", "captures": [{"key": "workspace", "generation": 1, "checkpoint_ref": "c1"}]});
    run.complete(a["step_id"].as_str().unwrap(), capture).await;
    let b = run.submit(tool("b", &[])).await;
    run.complete(b["step_id"].as_str().unwrap(), json!({"result": "B"}))
        .await;
    let b_seq = kernel.events(&run.id).last().unwrap().event_seq;
    run.submit(tool("c", &["workspace"])).await;
    (run, b_seq)
}

async fn fork(kernel: &rebuno_devkernel::DevKernel, id: &str, body: Value) -> (u16, Value) {
    client(
        "POST",
        &format!("{}/v0/executions/{id}/fork", kernel.url()),
        None,
        Some(&body.to_string()),
    )
    .await
}

#[tokio::test]
async fn fork_copies_the_settled_prefix_and_restores_checkpoints() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let (run, b_seq) = source(&kernel, &mut agent).await;
    let checkpoints = events_of(&kernel, &run.id, "resource.checkpointed");
    let c1_seq = checkpoints[1].payload["covered_seq"].as_u64().unwrap();

    let (status, forked) = fork(&kernel, &run.id, json!({"at_seq": b_seq})).await;
    assert_eq!(status, 201, "{forked}");
    let fork_id = forked["id"].as_str().unwrap().to_owned();
    assert_eq!(forked["forked_from"], json!(run.id));
    assert_eq!(forked["fork_seq"], b_seq);
    assert_eq!(forked["input"], json!({"n": 1}));
    assert_eq!(forked["status"], "running");
    assert_eq!(
        forked["restoration"],
        json!({"workspace": {"checkpoint_ref": "c1", "checkpoint_seq": c1_seq, "covered": true}})
    );
    // GET does not show the restoration.
    let (_, got) = client(
        "GET",
        &format!("{}/v0/executions/{fork_id}", kernel.url()),
        None,
        None,
    )
    .await;
    assert!(got.get("restoration").is_none());

    // Events: created, forked, copied steps and registration, restoration, start.
    let mut types = event_types(&kernel, &fork_id);
    types.retain(|t| t != "dispatch.acked");
    assert_eq!(types[..2], ["execution.created", "execution.forked"]);
    assert_eq!(
        types[types.len() - 2..],
        ["execution.started", "dispatch.queued"]
    );
    let forked_event = &kernel.events(&fork_id)[1].payload;
    assert_eq!(forked_event["source_execution_id"], json!(run.id));
    assert_eq!(forked_event["policy_override"], false);
    assert_eq!(forked_event["restoration"], forked["restoration"]);
    assert_eq!(types.iter().filter(|t| *t == "step.succeeded").count(), 2);
    assert!(!types.iter().any(|t| t == "resource.bound"));
    let initialized = events_of(&kernel, &fork_id, "resource.initialized");
    assert_eq!(
        initialized[0].payload,
        json!({"key": "workspace", "generation": 1, "checkpoint_ref": "c1"})
    );

    // Copied steps carry ids of the fork; C (never settled) is not copied.
    let steps = kernel.steps(&fork_id);
    assert_eq!(steps.len(), 2);
    for step in &steps {
        assert_eq!(step.status, "succeeded");
        let expected = identity::step_id(
            &fork_id,
            &step.kind,
            &step.target,
            &step.args_hash,
            step.occurrence,
        );
        assert_eq!(step.step_id, expected);
    }
    // The fork's resource: restored, unbound, covered by the copied checkpoint.
    let view = &kernel.resources(&fork_id)[0];
    assert_eq!(
        (view.generation, view.covered, view.binding.clone()),
        (1, true, None)
    );
    assert_eq!(view.checkpoint_ref.as_deref(), Some("c1"));
    // Every checkpoint by the fork point is copied (Go:
    // TestForkAtACapturedOutcomeLogsItsCheckpoint): c0, ended by A's copied start, and c1.
    let points = kernel.fork_points(&fork_id).unwrap();
    let copied: Vec<_> = points
        .checkpoints
        .iter()
        .map(|c| (c.checkpoint_ref.as_str(), c.invalidated_seq.is_some()))
        .collect();
    assert_eq!(copied, [("c0", true), ("c1", false)]);

    // The rerun replays the prefix and runs C live.
    let rerun = Run::attach(&kernel, &mut agent, &fork_id).await;
    let replay = rerun.submit(tool("a", &["workspace"])).await;
    assert_eq!(
        (replay["decision"].clone(), replay["result"].clone()),
        (json!("replay"), json!("A"))
    );
    let live = rerun.submit(tool("c", &["workspace"])).await;
    assert_eq!(live["decision"], "proceed");
    assert_eq!(
        live["resources"],
        json!([{"key": "workspace", "generation": 2, "due": true}])
    );
}

#[tokio::test]
async fn restoration_falls_back_to_earlier_checkpoints_and_the_initial_environment() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let (run, _) = source(&kernel, &mut agent).await;
    let executing = events_of(&kernel, &run.id, "step.executing");
    let registered = events_of(&kernel, &run.id, "resource.registered")[0].event_seq;
    let latest = kernel.events(&run.id).len() as u64;

    // After C started, c1 no longer covers: newest earlier checkpoint, not covered.
    let forked = kernel.fork(&run.id, latest).unwrap();
    let restoration = &forked.restoration.unwrap()["workspace"];
    assert_eq!(
        (
            restoration["checkpoint_ref"].as_str(),
            restoration["covered"].as_bool()
        ),
        (Some("c1"), Some(false))
    );
    let view = &kernel.resources(&forked.id)[0];
    assert!(!view.covered);
    assert_eq!(view.checkpoint_ref.as_deref(), Some("c1"));
    // Both checkpoints are copied, both ended (c1 by C's start, which is not copied: its
    // coverage ends where C's start would land in the fork).
    let points = kernel.fork_points(&forked.id).unwrap();
    assert_eq!(points.checkpoints.len(), 2);
    assert!(
        points
            .checkpoints
            .iter()
            .all(|c| c.invalidated_seq.is_some())
    );

    // Before the baseline: the initial environment.
    let forked = kernel.fork(&run.id, registered).unwrap();
    let restoration = &forked.restoration.unwrap()["workspace"];
    assert_eq!(
        (
            restoration["checkpoint_ref"].as_str(),
            restoration["covered"].as_bool()
        ),
        (None, Some(false))
    );
    // Uncovered: one past the source's generation there (Go:
    // TestForkWithoutACheckpointUsesTheInitialEnvironment).
    let initialized = events_of(&kernel, &forked.id, "resource.initialized");
    assert_eq!(
        initialized[0].payload,
        json!({"key": "workspace", "generation": 1})
    );

    // Before the registration: no resources, no restoration.
    let forked = kernel.fork(&run.id, registered - 1).unwrap();
    assert!(forked.restoration.is_none());
    assert!(kernel.resources(&forked.id).is_empty());

    // A's executing seq: the baseline was invalidated there, so c0 is "earlier".
    let forked = kernel.fork(&run.id, executing[0].event_seq).unwrap();
    let restoration = &forked.restoration.unwrap()["workspace"];
    assert_eq!(
        (
            restoration["checkpoint_ref"].as_str(),
            restoration["covered"].as_bool()
        ),
        (Some("c0"), Some(false))
    );
}

#[tokio::test]
async fn fork_validation_sessions_and_policy_override() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let (run, b_seq) = source(&kernel, &mut agent).await;
    let latest = kernel.events(&run.id).len() as u64;
    assert_eq!(fork(&kernel, &run.id, json!({"at_seq": 0})).await.0, 400);
    assert_eq!(
        fork(&kernel, &run.id, json!({"at_seq": latest + 1}))
            .await
            .0,
        400
    );
    assert_eq!(
        fork(&kernel, &run.id, json!({"at_seq": 1, "bogus": 1}))
            .await
            .0,
        400
    );
    assert_eq!(
        fork(&kernel, &Uuid::now_v7().to_string(), json!({"at_seq": 1}))
            .await
            .0,
        404
    );
    let (status, body) = fork(
        &kernel,
        &run.id,
        json!({"at_seq": 1, "policy_bundle": "rules: [{when: {}}]"}),
    )
    .await;
    assert_eq!(
        (status, body["code"].clone()),
        (400, json!("validation_error"))
    );

    // A fork into a new session; the same session again is a conflict.
    let (status, forked) = fork(&kernel, &run.id, json!({"at_seq": b_seq, "session": "f1"})).await;
    assert_eq!(status, 201);
    assert_eq!(forked["session"], "f1");
    assert_eq!(
        fork(&kernel, &run.id, json!({"at_seq": b_seq, "session": "f1"}))
            .await
            .0,
        409
    );
    let _ = agent.next().await;

    // A policy override applies to live steps; copied ones still replay.
    let deny = "default_action: deny";
    let (status, forked) = fork(
        &kernel,
        &run.id,
        json!({"at_seq": b_seq, "policy_bundle": deny}),
    )
    .await;
    assert_eq!(status, 201);
    let fork_id = forked["id"].as_str().unwrap().to_owned();
    assert_eq!(kernel.events(&fork_id)[1].payload["policy_override"], true);
    let rerun = Run::attach(&kernel, &mut agent, &fork_id).await;
    assert_eq!(rerun.submit(tool("b", &[])).await["decision"], "replay");
    let denied = rerun.submit(tool("c", &["workspace"])).await;
    assert_eq!(
        (denied["decision"].clone(), denied["rule_id"].clone()),
        (json!("denied"), json!("default"))
    );
    // A fork of the fork inherits the override.
    let grandchild = kernel.fork(&fork_id, 2).unwrap();
    assert_eq!(grandchild.status, ExecutionStatus::Running);
    assert_eq!(grandchild.forked_from, Some(fork_id));
}

#[tokio::test]
async fn fork_points_list_registrations_and_checkpoints() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let (run, _) = source(&kernel, &mut agent).await;
    let (status, points) = client(
        "GET",
        &format!("{}/v0/executions/{}/fork-points", kernel.url(), run.id),
        None,
        None,
    )
    .await;
    assert_eq!(status, 200);
    let registered = events_of(&kernel, &run.id, "resource.registered")[0].event_seq;
    let executing = events_of(&kernel, &run.id, "step.executing");
    assert_eq!(points["latest_seq"], kernel.events(&run.id).len());
    assert_eq!(points["resources"], json!({"workspace": registered}));
    let list = points["checkpoints"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["checkpoint_ref"], "c0");
    assert_eq!(list[0]["invalidated_seq"], executing[0].event_seq);
    assert_eq!(list[1]["invalidated_seq"], executing[2].event_seq);
    let (status, _) = client(
        "GET",
        &format!(
            "{}/v0/executions/{}/fork-points",
            kernel.url(),
            Uuid::now_v7()
        ),
        None,
        None,
    )
    .await;
    assert_eq!(status, 404);
}
