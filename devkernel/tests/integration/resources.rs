//! Resources and checkpoints over HTTP (PROTOCOL.md §1.9, §2.6).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Run, events_of, kernel_with_agent};
use rebuno_devkernel::NewExecution;
use serde_json::{Value, json};

fn tool(target: &str, resources: &[&str]) -> Value {
    json!({"kind": "tool_call", "target": target, "args": {"t": target},
           "idempotency": "safe_to_retry", "resources": resources})
}

fn workspace(every_steps: i64) -> String {
    json!({"key": "workspace", "driver_id": "fs", "configuration": {"root": "/tmp", "b": 1},
           "coverage_reuse": true, "every_steps": every_steps, "on_completion": null})
    .to_string()
}

fn errors(kernel: &rebuno_devkernel::DevKernel, id: &str) -> Vec<String> {
    events_of(kernel, id, "resource.checkpoint_failed")
        .into_iter()
        .map(|e| e.payload["error"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn register_validates_and_preserves_policy() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;

    let (status, view) = run.post("/resources", &workspace(2)).await;
    assert_eq!(status, 200, "{view}");
    let registered = events_of(&kernel, &run.id, "resource.registered");
    assert_eq!(registered.len(), 1);
    assert_eq!(
        view,
        json!({"key": "workspace", "driver_id": "fs", "configuration": {"b": 1, "root": "/tmp"},
               "coverage_reuse": true, "every_steps": 2, "on_completion": true,
               "registered_seq": registered[0].event_seq, "generation": 0, "count": 0,
               "covered": false})
    );
    assert_eq!(
        registered[0].payload,
        json!({"key": "workspace", "driver_id": "fs", "configuration": {"b": 1, "root": "/tmp"},
               "coverage_reuse": true, "every_steps": 2, "on_completion": true})
    );

    // Same configuration in another key order, interval omitted (0): the policy stays.
    let again = r#"{"key":"workspace","driver_id":"fs","configuration":{"b":1,"root":"/tmp"},"coverage_reuse":true,"every_steps":0,"on_completion":false}"#;
    let (status, view) = run.post("/resources", again).await;
    assert_eq!(status, 200);
    assert_eq!(
        (view["every_steps"].clone(), view["on_completion"].clone()),
        (json!(2), json!(true))
    );
    // A positive interval does not change it either (Go:
    // TestRepeatedRegistrationKeepsItsPolicyAndRefusesAnotherDriverOrCapability).
    let (_, view) = run.post("/resources", &workspace(5)).await;
    assert_eq!(view["every_steps"], 2);
    assert!(events_of(&kernel, &run.id, "resource.reconfigured").is_empty());
    assert_eq!(events_of(&kernel, &run.id, "resource.registered").len(), 1);

    // Conflicts and validation.
    let conflict = r#"{"key":"workspace","driver_id":"s3","configuration":{"b":1,"root":"/tmp"},"coverage_reuse":true}"#;
    assert_eq!(run.post("/resources", conflict).await.0, 409);
    let reuse = r#"{"key":"workspace","driver_id":"fs","configuration":{"b":1,"root":"/tmp"},"coverage_reuse":false}"#;
    assert_eq!(run.post("/resources", reuse).await.0, 409);
    for bad in [
        r#"{"key":"a/b","driver_id":"fs"}"#,
        r#"{"key":"","driver_id":"fs"}"#,
        r#"{"key":"k","driver_id":""}"#,
        r#"{"key":"k","driver_id":"fs","every_steps":-1}"#,
        r#"{"key":"k","driver_id":"fs","extra":1}"#,
    ] {
        let (status, body) = run.post("/resources", bad).await;
        assert_eq!(
            (status, body["code"].clone()),
            (400, json!("validation_error")),
            "{bad}"
        );
    }
    // An omitted interval is every step, on completion too (Go:
    // TestForkAtACapturedOutcomeLogsItsCheckpoint).
    let (_, view) = run
        .post("/resources", r#"{"key":"k","driver_id":"fs"}"#)
        .await;
    assert_eq!(
        (view["every_steps"].clone(), view["on_completion"].clone()),
        (json!(1), json!(true))
    );
    // An explicit 0 is no policy, as both SDKs send it: on_completion false even when asked.
    let (_, view) = run
        .post(
            "/resources",
            r#"{"key":"k0","driver_id":"fs","every_steps":0,"on_completion":true}"#,
        )
        .await;
    assert_eq!(
        (view["every_steps"].clone(), view["on_completion"].clone()),
        (json!(0), json!(false))
    );

    // A stale lease is fenced.
    let stale = Run { attempt: 9, ..run };
    assert_eq!(stale.post("/resources", &workspace(1)).await.0, 409);
}

#[tokio::test]
async fn bind_once_and_idempotently() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    run.post("/resources", &workspace(1)).await;
    let bind = |body: &'static str| run.post("/resources/workspace/binding", body);
    assert_eq!(bind(r#"{"binding": {"path": "/x", "id": 7}}"#).await.0, 204);
    assert_eq!(bind(r#"{"binding":{"id":7,"path":"/x"}}"#).await.0, 204);
    assert_eq!(events_of(&kernel, &run.id, "resource.bound").len(), 1);
    let (status, body) = bind(r#"{"binding": {"path": "/y"}}"#).await;
    assert_eq!(status, 409);
    assert_eq!(body["code"], "conflict");
    assert_eq!(bind(r#"{"binding": null}"#).await.0, 400);
    assert_eq!(bind(r"{}").await.0, 400);
    let (status, _) = run
        .post("/resources/nope/binding", r#"{"binding": 1}"#)
        .await;
    assert_eq!(status, 404);
    let (_, view) = run.post("/resources", &workspace(1)).await;
    assert_eq!(view["binding"], json!({"id": 7, "path": "/x"}));
}

#[tokio::test]
async fn generations_counts_and_captures() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    run.post("/resources", &workspace(2)).await;

    // Baseline capture at generation 0.
    let baseline = r#"{"captures":[{"key":"workspace","generation":0,"checkpoint_ref":"c0"}]}"#;
    let latest = kernel.events(&run.id).len() as u64;
    assert_eq!(run.post("/resources/checkpoints", baseline).await.0, 204);
    let (_, view) = run.post("/resources", &workspace(2)).await;
    assert_eq!(
        (view["covered"].clone(), view["checkpoint_ref"].clone()),
        (json!(true), json!("c0"))
    );
    let checkpointed = events_of(&kernel, &run.id, "resource.checkpointed");
    assert_eq!(checkpointed[0].payload["covered_seq"], latest);

    // A declared step bumps the generation and invalidates c0 at its step.executing.
    let first = run.submit(tool("write", &["workspace"])).await;
    assert_eq!(
        first["resources"],
        json!([{"key": "workspace", "generation": 1}])
    );
    let executing = events_of(&kernel, &run.id, "step.executing");
    assert_eq!(executing[0].payload["resources"], json!(["workspace"]));
    assert_eq!(executing[0].payload["generations"], json!({"workspace": 1}));
    let points = kernel.fork_points(&run.id).unwrap();
    assert_eq!(
        points.checkpoints[0].invalidated_seq,
        Some(executing[0].event_seq)
    );
    let step = first["step_id"].as_str().unwrap();
    let capture = json!({"result": 1, "captures": [{"key": "workspace", "generation": 1, "checkpoint_ref": "c1"}]});
    assert_eq!(
        run.complete(step, capture).await,
        json!({"decision": "recorded"})
    );
    let succeeded = events_of(&kernel, &run.id, "step.succeeded");
    let checkpointed = events_of(&kernel, &run.id, "resource.checkpointed");
    assert_eq!(
        checkpointed[1].payload["covered_seq"],
        succeeded[0].event_seq
    );
    let view = &kernel.resources(&run.id)[0];
    assert_eq!((view.generation, view.count, view.covered), (1, 1, true));

    // An undeclared tool step leaves a coverage-reusing resource alone.
    let other = run.submit(tool("read", &[])).await;
    assert!(other.get("resources").is_none());
    run.complete(other["step_id"].as_str().unwrap(), json!({"result": 2}))
        .await;
    assert_eq!(kernel.resources(&run.id)[0].count, 1);

    // The second affecting step is due (count + 1 = 2).
    let second = run.submit(tool("write2", &["workspace"])).await;
    assert_eq!(
        second["resources"],
        json!([{"key": "workspace", "generation": 2, "due": true}])
    );
    let refused = json!({"result": 3, "captures": [
        {"key": "workspace", "generation": 1, "checkpoint_ref": "old"},
        {"key": "nope", "generation": 2, "checkpoint_ref": "x"},
        {"key": "workspace", "generation": 2, "checkpoint_ref": ""},
    ], "capture_failures": [{"key": "workspace", "generation": 2, "error": "disk full"}]});
    let decision = run
        .complete(second["step_id"].as_str().unwrap(), refused)
        .await;
    assert_eq!(decision["decision"], "recorded");
    assert_eq!(
        errors(&kernel, &run.id),
        [
            "stale_generation",
            "unknown_resource",
            "missing_checkpoint_ref",
            "disk full"
        ]
    );
    let view = &kernel.resources(&run.id)[0];
    assert_eq!((view.generation, view.count, view.covered), (2, 2, false));

    // Duplicates and stale generations on the publish route.
    let publish = |generation: u64, reference: &str| {
        json!({"captures": [{"key": "workspace", "generation": generation, "checkpoint_ref": reference}]})
            .to_string()
    };
    assert_eq!(
        run.post("/resources/checkpoints", &publish(2, "c2"))
            .await
            .0,
        204
    );
    // A later batch may checkpoint the same generation again; one batch may not twice (Go:
    // TestForkKeepsTheNewestCheckpointAtTheSameCopiedBoundary).
    let twice = json!({"captures": [
        {"key": "workspace", "generation": 2, "checkpoint_ref": "again"},
        {"key": "workspace", "generation": 2, "checkpoint_ref": "twice"},
    ]});
    run.post("/resources/checkpoints", &twice.to_string()).await;
    assert_eq!(
        kernel.resources(&run.id)[0].checkpoint_ref.as_deref(),
        Some("again")
    );
    run.post("/resources/checkpoints", &publish(7, "future"))
        .await;
    // A running writer blocks captures.
    let third = run.submit(tool("write3", &["workspace"])).await;
    run.post("/resources/checkpoints", &publish(3, "c3")).await;
    assert_eq!(
        errors(&kernel, &run.id)[4..],
        ["duplicate_capture", "stale_generation", "writers_active"]
    );
    // Replayed outcomes never capture.
    run.complete(third["step_id"].as_str().unwrap(), json!({"result": 4}))
        .await;
    let replay = run
        .complete(
            third["step_id"].as_str().unwrap(),
            json!({"result": 4, "captures": [{"key": "workspace", "generation": 3, "checkpoint_ref": "late"}]}),
        )
        .await;
    assert_eq!(replay["decision"], "replay");
    assert!(
        !events_of(&kernel, &run.id, "resource.checkpointed")
            .iter()
            .any(|e| e.payload["checkpoint_ref"] == "late")
    );

    // Unknown declared resources are refused; LLM calls ignore theirs.
    let (status, _) = run.post("/steps", &tool("x", &["nope"]).to_string()).await;
    assert_eq!(status, 400);
    let llm = run
        .submit(json!({"kind": "llm_call", "target": "m", "args": {}, "resources": ["nope", "workspace"]}))
        .await;
    assert_eq!(llm["decision"], "proceed");
    assert!(llm.get("resources").is_none());
}

#[tokio::test]
async fn coverage_reuse_false_is_touched_by_every_live_step() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    let scratch = r#"{"key":"scratch","driver_id":"mem","coverage_reuse":false,"every_steps":1}"#;
    run.post("/resources", scratch).await;
    let step = run.submit(tool("any", &[])).await;
    assert_eq!(
        step["resources"],
        json!([{"key": "scratch", "generation": 1, "due": true}])
    );
    run.complete(step["step_id"].as_str().unwrap(), json!({"result": null}))
        .await;
    // LLM calls bump it too but are not counted.
    let llm = run
        .submit(json!({"kind": "llm_call", "target": "m", "args": {"x": 1}}))
        .await;
    assert_eq!(
        llm["resources"],
        json!([{"key": "scratch", "generation": 2}])
    );
    run.complete(llm["step_id"].as_str().unwrap(), json!({"result": {}}))
        .await;
    let view = &kernel.resources(&run.id)[0];
    assert_eq!((view.generation, view.count), (2, 1));
    // A failed step counts and may carry captures too.
    let failing = run.submit(tool("boom", &[])).await;
    let body = json!({"error": {"message": "boom"}, "captures": [{"key": "scratch", "generation": 3, "checkpoint_ref": "f3"}]});
    let (status, decision) = run
        .post(
            &format!("/steps/{}/fail", failing["step_id"].as_str().unwrap()),
            &body.to_string(),
        )
        .await;
    assert_eq!((status, decision), (200, json!({"decision": "recorded"})));
    let view = &kernel.resources(&run.id)[0];
    assert_eq!((view.generation, view.count, view.covered), (3, 2, true));
    // A retried executing step touching resources starts again.
    let retry = run.submit(tool("slow", &[])).await;
    kernel.redeliver(&run.id).unwrap();
    let again = Run::attach(&kernel, &mut agent, &run.id).await;
    let decision = again.submit(tool("slow", &[])).await;
    assert_eq!(decision["step_id"], retry["step_id"]);
    assert_eq!(
        decision["resources"],
        json!([{"key": "scratch", "generation": 5, "due": true}])
    );
}

#[tokio::test]
async fn session_turns_inherit_registrations_and_bindings() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let run = Run::start(
        &kernel,
        &mut agent,
        r#"{"agent_id":"hello","session":"s1"}"#,
    )
    .await;
    run.post("/resources", &workspace(1)).await;
    run.post(
        "/resources/workspace/binding",
        r#"{"binding":{"dir":"/w"}}"#,
    )
    .await;
    let baseline = r#"{"captures":[{"key":"workspace","generation":0,"checkpoint_ref":"c0"}]}"#;
    run.post("/resources/checkpoints", baseline).await;
    let step = run.submit(tool("write", &["workspace"])).await;
    run.complete(step["step_id"].as_str().unwrap(), json!({"result": 1}))
        .await;
    assert_eq!(run.post("/complete", r#"{"output": "done"}"#).await.0, 204);

    let next = kernel
        .create_execution(NewExecution::new("hello", json!({})).session("s1"))
        .await
        .unwrap();
    assert_eq!(next.parent_execution_id, Some(run.id));
    let views = kernel.resources(&next.id);
    assert_eq!(views.len(), 1);
    let view = &views[0];
    assert_eq!(view.binding, Some(json!({"dir": "/w"})));
    assert_eq!((view.generation, view.count, view.covered), (0, 0, false));
    assert_eq!(view.checkpoint_ref, None);
    let kinds: Vec<String> = kernel
        .events(&next.id)
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds[..5],
        [
            "execution.created",
            "execution.started",
            "resource.registered",
            "resource.bound",
            "dispatch.queued"
        ]
    );
    let points = kernel.fork_points(&next.id).unwrap();
    assert_eq!(points.resources[&view.key], 3);
}
