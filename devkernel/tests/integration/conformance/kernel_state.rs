//! Conformance: the Go kernel's tests of execution state (`internal/kernel`: forks, resources,
//! sessions, subagents, authorization, policy tests) as scenarios against the dev kernel's
//! HTTP API. Each test names the Go test it mirrors; `/work/briefs/table-kernel_state.md`
//! lists every Go test of these files, with the ones left out and why.

use std::time::Duration;

use crate::common::time::Timestamp;
use rebuno::wire::ExecutionStatus;
use rebuno_devkernel::{AgentSpec, DevKernel, DevKernelBuilder};
use serde_json::{Value, json};

use crate::common::{AgentClient, Delivery, FakeAgent, Run, SECRET, client, events_of};

/// A second agent, served by the same fake webhook as `hello`.
const OTHER: &str = "helper";

/// A kernel with `hello` and [`OTHER`] registered, and the deliveries of both.
struct Lab {
    kernel: DevKernel,
    agent: FakeAgent,
    /// Deliveries that arrived while another execution's was awaited.
    early: Vec<Delivery>,
    /// Bearer token for client calls, when the kernel requires one.
    token: Option<String>,
}

impl Lab {
    async fn new() -> Self {
        Self::on(DevKernel::builder(), None).await
    }

    async fn on(builder: DevKernelBuilder, token: Option<&str>) -> Self {
        let agent = FakeAgent::start().await;
        let kernel = builder.start().await.unwrap();
        for id in ["hello", OTHER] {
            kernel
                .register_agent(AgentSpec::new(id, &agent.url, SECRET))
                .unwrap();
        }
        Self {
            kernel,
            agent,
            early: Vec::new(),
            token: token.map(str::to_owned),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.kernel.url())
    }

    /// A client call with the lab's bearer token.
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let body = body.map(|b| b.to_string());
        client(
            method,
            &self.url(path),
            self.token.as_deref(),
            body.as_deref(),
        )
        .await
    }

    async fn create_raw(&self, body: Value) -> (u16, Value) {
        self.call("POST", "/v0/executions", Some(body)).await
    }

    async fn create(&self, body: Value) -> Value {
        let (status, created) = self.create_raw(body).await;
        assert_eq!(status, 201, "{created}");
        created
    }

    /// Creates an execution of `agent` (in `session` when given) and returns its id.
    async fn create_in(&self, agent: &str, session: Option<&str>) -> String {
        let mut body = json!({"agent_id": agent, "input": {}});
        if let Some(session) = session {
            body["session"] = json!(session);
        }
        id_of(&self.create(body).await)
    }

    /// Waits for the next delivery of `id` (keeping other executions' for later) and signs
    /// as the execution's agent with that lease.
    async fn lease(&mut self, id: &str) -> Run {
        let wanted = id.to_owned();
        let delivery = match self.early.iter().position(|d| d.execution_id == wanted) {
            Some(at) => self.early.remove(at),
            None => loop {
                let delivery = self.agent.next().await;
                if delivery.execution_id == wanted {
                    break delivery;
                }
                self.early.push(delivery);
            },
        };
        let mut api = AgentClient::new(&self.kernel.url());
        api.agent_id = self.get(id).await["agent_id"].as_str().unwrap().to_owned();
        Run {
            id: id.to_owned(),
            dispatch: delivery.dispatch_id,
            attempt: delivery.attempt,
            api,
        }
    }

    async fn get(&self, id: &str) -> Value {
        let (status, body) = self
            .call("GET", &format!("/v0/executions/{id}"), None)
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    async fn status(&self, id: &str) -> String {
        self.get(id).await["status"].as_str().unwrap().to_owned()
    }

    /// `POST /v0/executions/{id}/fork` with `token` (the lab's when `None`).
    async fn fork_as(&self, id: &str, body: Value, token: Option<&str>) -> (u16, Value) {
        let token = token.or(self.token.as_deref());
        client(
            "POST",
            &self.url(&format!("/v0/executions/{id}/fork")),
            token,
            Some(&body.to_string()),
        )
        .await
    }

    async fn fork(&self, id: &str, body: Value) -> (String, Value) {
        let (status, fork) = self.fork_as(id, body, None).await;
        assert_eq!(status, 201, "{fork}");
        (id_of(&fork), fork)
    }

    /// The seq of the execution's newest event.
    fn latest(&self, id: &str) -> u64 {
        self.kernel.events(id).last().unwrap().event_seq
    }

    async fn fork_points(&self, id: &str) -> Value {
        let (status, points) = self
            .call("GET", &format!("/v0/executions/{id}/fork-points"), None)
            .await;
        assert_eq!(status, 200, "{points}");
        points
    }

    /// Whether every resource registered by `seq` has a checkpoint covering `seq`.
    async fn covered_at(&self, id: &str, seq: u64) -> bool {
        let points = self.fork_points(id).await;
        let latest = points["latest_seq"].as_u64().unwrap();
        assert!((1..=latest).contains(&seq), "{seq} outside 1..={latest}");
        let checkpoints = points["checkpoints"].as_array().unwrap();
        points["resources"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, registered)| registered.as_u64().unwrap() <= seq)
            .all(|(key, _)| {
                checkpoints.iter().any(|c| {
                    c["key"] == key.as_str()
                        && c["covered_seq"].as_u64().unwrap() <= seq
                        && c["invalidated_seq"].as_u64().is_none_or(|end| seq < end)
                })
            })
    }

    async fn grant(&self, approval: &Value) {
        let path = format!("/v0/approvals/{}/grant", approval.as_str().unwrap());
        let (status, body) = self
            .call("POST", &path, Some(json!({"decided_by": "test"})))
            .await;
        assert_eq!(status, 204, "{body}");
    }

    async fn cancel(&self, id: &str) {
        let (status, body) = self
            .call("POST", &format!("/v0/executions/{id}/cancel"), None)
            .await;
        assert!(status < 300, "{status} {body}");
    }

    async fn wait_status(&self, id: &str, status: ExecutionStatus) -> String {
        let _ = self
            .kernel
            .wait_until(id, Duration::from_secs(2), |s| s == status)
            .await;
        self.status(id).await
    }
}

fn id_of(execution: &Value) -> String {
    execution["id"].as_str().unwrap().to_owned()
}

fn step_id(decision: &Value) -> &str {
    decision["step_id"].as_str().unwrap()
}

fn tool(target: &str, idempotency: &str) -> Value {
    json!({"kind": "tool_call", "target": target, "args": {}, "idempotency": idempotency})
}

fn declaring(target: &str, resources: &[&str]) -> Value {
    json!({"kind": "tool_call", "target": target, "args": {}, "resources": resources})
}

/// Submits a tool step and completes it with `result` when it may run.
async fn run_step(run: &Run, target: &str, idempotency: &str, result: Value) -> Value {
    let decision = run.submit(tool(target, idempotency)).await;
    if decision["decision"] == "proceed" {
        run.complete(step_id(&decision), json!({"result": result}))
            .await;
    }
    decision
}

async fn complete_execution(run: &Run, body: Value) {
    let (status, answer) = run.post("/complete", &body.to_string()).await;
    assert_eq!(status, 204, "{answer}");
}

async fn fail_execution(run: &Run) {
    let (status, answer) = run.post("/fail", r#"{"error": "failed"}"#).await;
    assert_eq!(status, 204, "{answer}");
}

/// The `workspace` resource of driver `test.v1`, with `policy`'s fields added.
fn workspace(policy: Value) -> Value {
    let mut body = json!({"key": "workspace", "driver_id": "test.v1"});
    for (field, value) in policy.as_object().unwrap() {
        body[field] = value.clone();
    }
    body
}

async fn register(run: &Run, body: Value) -> Value {
    let (status, view) = run.post("/resources", &body.to_string()).await;
    assert_eq!(status, 200, "{view}");
    view
}

async fn bind(run: &Run, key: &str, binding: Value) {
    let path = format!("/resources/{key}/binding");
    let (status, body) = run
        .post(&path, &json!({"binding": binding}).to_string())
        .await;
    assert_eq!(status, 204, "{body}");
}

async fn publish(run: &Run, captures: Value) {
    let body = json!({"captures": captures}).to_string();
    let (status, answer) = run.post("/resources/checkpoints", &body).await;
    assert_eq!(status, 204, "{answer}");
}

async fn publish_workspace(run: &Run, generation: u64, reference: &str) {
    publish(
        run,
        json!([{"key": "workspace", "generation": generation, "checkpoint_ref": reference}]),
    )
    .await;
}

/// Completes a step with `"ok"`, capturing `reference` for every resource due a capture.
async fn complete_tool(run: &Run, decision: &Value, reference: &str) {
    let captures: Vec<Value> = decision["resources"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|r| r["due"] == true)
        .map(|r| json!({"key": r["key"], "generation": r["generation"], "checkpoint_ref": reference}))
        .collect();
    run.complete(
        step_id(decision),
        json!({"result": "ok", "captures": captures}),
    )
    .await;
}

/// The resources a decision touched (absent and empty alike).
fn touched(decision: &Value) -> Vec<Value> {
    decision["resources"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn refusals(kernel: &DevKernel, id: &str) -> Vec<String> {
    events_of(kernel, id, "resource.checkpoint_failed")
        .iter()
        .map(|e| e.payload["error"].as_str().unwrap().to_owned())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Forks (internal/kernel/fork_test.go)

/// Go: TestForkReplaysStepsRecordedBeforeTheForkPoint (internal/kernel/fork_test.go)
#[tokio::test]
async fn fork_replays_steps_recorded_before_the_fork_point() {
    let mut lab = Lab::new().await;
    let source = lab.create_in("hello", Some("main")).await;
    let run = lab.lease(&source).await;
    run_step(&run, "search", "safe_to_retry", json!({"hits": 1})).await;
    let at = lab.latest(&source);
    run_step(&run, "summarize", "safe_to_retry", json!("old")).await;

    let (fork_id, fork) = lab
        .fork(&source, json!({"session": "rewind", "at_seq": at}))
        .await;
    assert_eq!(fork["forked_from"], json!(source));
    assert_eq!(fork["fork_seq"], at);
    assert!(fork["parent_execution_id"].is_null(), "{fork}");

    let rerun = lab.lease(&fork_id).await;
    let replayed = run_step(&rerun, "search", "safe_to_retry", json!({})).await;
    assert_eq!(replayed["decision"], "replay");
    let live = run_step(&rerun, "summarize", "safe_to_retry", json!("new")).await;
    assert_eq!(live["decision"], "proceed");

    let mut types = Vec::new();
    for event in lab.kernel.events(&fork_id) {
        let started = event.kind == "execution.started";
        types.push(event.kind);
        if started {
            break;
        }
    }
    assert_eq!(
        types,
        [
            "execution.created",
            "execution.forked",
            "step.proposed",
            "step.allowed",
            "step.executing",
            "step.succeeded",
            "execution.started"
        ]
    );
}

const EFFECT_POLICY: &str = "rules:
  - id: allow-write
    when:
      target: write
    then:
      decision: allow
  - id: deny-remove
    when:
      target: remove
    then:
      decision: deny
  - id: approve-publish
    when:
      target: publish
    then:
      decision: require_approval
";

/// A source (session `main`) that ran the `at_most_once` step `write` under
/// [`EFFECT_POLICY`], and a fork of it without a session whose rerun replays that step.
async fn effect_fork(lab: &mut Lab) -> Run {
    let (status, body) = lab
        .call(
            "POST",
            "/v0/policies/hello",
            Some(json!({"bundle": EFFECT_POLICY})),
        )
        .await;
    assert_eq!(status, 204, "{body}");
    let source = lab.create_in("hello", Some("main")).await;
    let run = lab.lease(&source).await;
    run_step(&run, "write", "at_most_once", json!("recorded")).await;
    let at = lab.latest(&source);
    let (fork_id, fork) = lab.fork(&source, json!({"at_seq": at})).await;
    assert_eq!(fork["status"], "running", "{fork}");
    assert!(fork["session"].is_null(), "{fork}");
    let rerun = lab.lease(&fork_id).await;
    let copied = run_step(&rerun, "write", "at_most_once", json!({})).await;
    assert_eq!(
        (copied["decision"].clone(), copied["result"].clone()),
        (json!("replay"), json!("recorded"))
    );
    rerun
}

/// Go: TestForkAtMostOnceEffectsFollowAgentPolicy/write (internal/kernel/fork_test.go)
#[tokio::test]
async fn a_forks_live_at_most_once_step_the_policy_allows_proceeds() {
    let mut lab = Lab::new().await;
    let rerun = effect_fork(&mut lab).await;
    let live = run_step(&rerun, "write", "at_most_once", json!("new")).await;
    assert_eq!(live["decision"], "proceed", "{live}");
}

/// Go: TestForkAtMostOnceEffectsFollowAgentPolicy/remove (internal/kernel/fork_test.go)
#[tokio::test]
async fn a_forks_live_at_most_once_step_the_policy_denies_is_denied() {
    let mut lab = Lab::new().await;
    let rerun = effect_fork(&mut lab).await;
    let live = run_step(&rerun, "remove", "at_most_once", json!("new")).await;
    assert_eq!(
        (live["decision"].clone(), live["rule_id"].clone()),
        (json!("denied"), json!("deny-remove")),
        "{live}"
    );
}

/// Go: TestForkAtMostOnceEffectsFollowAgentPolicy/publish (internal/kernel/fork_test.go)
#[tokio::test]
async fn a_forks_live_at_most_once_step_the_policy_gates_waits_for_its_approval() {
    let mut lab = Lab::new().await;
    let rerun = effect_fork(&mut lab).await;
    let fork_id = rerun.id.clone();
    let live = run_step(&rerun, "publish", "at_most_once", json!("new")).await;
    assert_eq!(live["decision"], "blocked", "{live}");
    let awaiting = &events_of(&lab.kernel, &fork_id, "step.awaiting_approval")[0];
    assert_eq!(awaiting.payload["rule_id"], "approve-publish");
    lab.grant(&live["approval_id"]).await;
    let resumed = lab.lease(&fork_id).await;
    let approved = run_step(&resumed, "publish", "at_most_once", json!("approved")).await;
    assert_eq!(approved["decision"], "proceed", "{approved}");
}

/// Go: TestCreateContinuesANamedParent (internal/kernel/fork_test.go)
#[tokio::test]
async fn create_continues_a_named_parent() {
    let mut lab = Lab::new().await;
    let source = lab.create_in("hello", Some("main")).await;
    let run = lab.lease(&source).await;
    let with_parent = |session: Option<&str>| {
        let mut body = json!({"agent_id": "hello", "input": {}, "parent_execution_id": source});
        if let Some(session) = session {
            body["session"] = json!(session);
        }
        body
    };
    let (status, body) = lab.create_raw(with_parent(Some("alt"))).await;
    assert_eq!(status, 409, "parent still running: {body}");
    complete_execution(&run, json!({"output": {}, "state": {"turns": 1}})).await;
    let (status, body) = lab.create_raw(with_parent(Some("main"))).await;
    assert_eq!(status, 409, "parent named into an existing session: {body}");

    let one_off = lab.create(with_parent(None)).await;
    assert_eq!(one_off["status"], "running");
    assert_eq!(one_off["parent_execution_id"], json!(source));
    let branch = lab.create(with_parent(Some("alt"))).await;
    assert_eq!(branch["status"], "running");
    assert_eq!(branch["parent_execution_id"], json!(source));
    let branch = id_of(&branch);
    let (_, previous) = lab
        .call("GET", &format!("/v0/executions/{branch}/previous"), None)
        .await;
    assert_eq!(previous, json!({"state": {"turns": 1}}));

    let branch_run = lab.lease(&branch).await;
    complete_execution(&branch_run, json!({"output": {}})).await;
    let next = lab
        .create(json!({"agent_id": "hello", "session": "alt"}))
        .await;
    assert_eq!(next["parent_execution_id"], json!(branch));
}

/// Go: TestForkPolicyOverride (internal/kernel/fork_test.go), all but its last check (that one
/// is `a_live_at_most_once_step_a_forks_own_bundle_allows_proceeds`).
#[tokio::test]
async fn fork_policy_override_needs_policies_write_and_is_inherited() {
    let mut lab = Lab::new().await;
    let source = lab.create_in("hello", Some("main")).await;
    let run = lab.lease(&source).await;
    let at = lab.latest(&source);
    let deny = "rules:\n  - id: no-search\n    when:\n      target: search\n    then:\n      decision: deny\n";
    let writer = lab
        .kernel
        .create_api_key("writer", &["executions:write"])
        .unwrap();

    let strict = json!({"session": "strict", "at_seq": at, "policy_bundle": deny});
    let (status, body) = lab.fork_as(&source, strict.clone(), Some(&writer)).await;
    assert_eq!(status, 403, "override without policies:write: {body}");
    let (fork_id, _) = lab.fork(&source, strict).await;
    let fork_run = lab.lease(&fork_id).await;
    let denied = run_step(&fork_run, "search", "at_most_once", json!({})).await;
    assert_eq!(denied["decision"], "denied", "fork under the override");
    let allowed = run_step(&run, "search", "at_most_once", json!({})).await;
    assert_eq!(
        allowed["decision"], "proceed",
        "source under the agent policy"
    );

    let fork_at = lab.latest(&fork_id);
    let (status, inherited) = lab
        .fork_as(&fork_id, json!({"at_seq": fork_at}), Some(&writer))
        .await;
    assert_eq!(status, 201, "{inherited}");
    let inherited_run = lab.lease(&id_of(&inherited)).await;
    for what in ["copied denial", "live call under the inherited policy"] {
        let decision = run_step(&inherited_run, "search", "at_most_once", json!({})).await;
        assert_eq!(decision["decision"], "denied", "{what}: {decision}");
    }

    let (replaced, _) = lab
        .fork(
            &fork_id,
            json!({"at_seq": fork_at, "policy_bundle": ALLOW_SEARCH}),
        )
        .await;
    let replaced_run = lab.lease(&replaced).await;
    let copied = run_step(&replaced_run, "search", "at_most_once", json!({})).await;
    assert_eq!(
        copied["decision"], "denied",
        "copied denial under the override"
    );
}

const ALLOW_SEARCH: &str = "rules:\n  - id: allow-search\n    when:\n      target: search\n    then:\n      decision: allow\n";

/// Go: TestForkPolicyOverride (internal/kernel/fork_test.go), its last check: a fork's own
/// bundle that allows the call lets a live `at_most_once` step proceed.
#[tokio::test]
async fn a_live_at_most_once_step_a_forks_own_bundle_allows_proceeds() {
    let mut lab = Lab::new().await;
    let source = lab.create_in("hello", Some("main")).await;
    let at = lab.latest(&source);
    let (fork_id, _) = lab
        .fork(
            &source,
            json!({"at_seq": at, "policy_bundle": ALLOW_SEARCH}),
        )
        .await;
    let rerun = lab.lease(&fork_id).await;
    let live = run_step(&rerun, "search", "at_most_once", json!({})).await;
    assert_eq!(
        live["decision"], "proceed",
        "live call under the override: {live}"
    );
}

// ---------------------------------------------------------------------------------------------
// Resources and checkpoints (internal/kernel/resource_test.go)

/// Go: TestSessionContinuesResourceBindingsAndForksRestoreSeparately (internal/kernel/resource_test.go)
#[tokio::test]
async fn session_continues_resource_bindings_and_forks_restore_separately() {
    let mut lab = Lab::new().await;
    let policy = workspace(json!({"every_steps": 3, "on_completion": false}));
    let original = json!({"sandbox_id": "original"});
    let database = json!({"key": "database", "driver_id": "database.v1"});

    let first = lab.create_in("hello", Some("main")).await;
    let run = lab.lease(&first).await;
    register(&run, policy.clone()).await;
    bind(&run, "workspace", original.clone()).await;
    register(&run, database.clone()).await;
    bind(&run, "database", json!({"database": "original"})).await;
    publish_workspace(&run, 0, "first-baseline").await;
    let write = run.submit(declaring("write", &["workspace"])).await;
    complete_tool(&run, &write, "").await;
    let second = lab.create_in("hello", Some("main")).await;
    complete_execution(&run, json!({"output": {}})).await;

    let second_run = lab.lease(&second).await;
    let view = register(&second_run, workspace(json!({}))).await;
    assert!(view["checkpoint_ref"].is_null(), "{view}");
    assert_eq!(view["covered"], false);
    assert_eq!(view["binding"], original);
    assert_eq!(
        (
            view["count"].clone(),
            view["generation"].clone(),
            view["every_steps"].clone(),
            view["on_completion"].clone()
        ),
        (json!(0), json!(0), json!(3), json!(false)),
        "continued policy and progress: {view}"
    );
    let view = register(&second_run, database).await;
    assert_eq!(view["binding"], json!({"database": "original"}));
    publish(
        &second_run,
        json!([
            {"key": "workspace", "generation": 0, "checkpoint_ref": "second-workspace"},
            {"key": "database", "generation": 0, "checkpoint_ref": "second-database"},
        ]),
    )
    .await;

    let (fork_id, _) = lab
        .fork(
            &second,
            json!({"at_seq": lab.latest(&second), "session": "branch"}),
        )
        .await;
    let fork_run = lab.lease(&fork_id).await;
    let view = register(&fork_run, policy.clone()).await;
    assert!(view["binding"].is_null(), "{view}");
    assert_eq!(view["checkpoint_ref"], "second-workspace");
    assert_eq!(view["covered"], true);
    let fork_binding = json!({"sandbox_id": "fork"});
    bind(&fork_run, "workspace", fork_binding.clone()).await;
    complete_execution(&fork_run, json!({"output": {}})).await;

    let followup = lab.create_in("hello", Some("branch")).await;
    let followup_run = lab.lease(&followup).await;
    let view = register(&followup_run, policy.clone()).await;
    assert!(view["checkpoint_ref"].is_null(), "{view}");
    assert_eq!(view["covered"], false);
    assert_eq!(view["binding"], fork_binding);
    let view = register(&second_run, policy).await;
    assert_eq!(view["binding"], original);
}

/// Go: TestSessionResourceBindingsStayWithinTheirAgentAndSession (internal/kernel/resource_test.go),
/// the other agent and the other session.
#[tokio::test]
async fn session_resource_bindings_stay_within_their_agent_and_session() {
    let mut lab = Lab::new().await;
    let source = lab.create_in("hello", Some("main")).await;
    let run = lab.lease(&source).await;
    register(&run, workspace(json!({}))).await;
    bind(&run, "workspace", json!({"sandbox_id": "source"})).await;
    complete_execution(&run, json!({"output": {}})).await;

    let other_agent = lab.create_in(OTHER, Some("main")).await;
    let other_session = lab.create_in("hello", Some("other")).await;
    for id in [other_agent, other_session] {
        let run = lab.lease(&id).await;
        let view = register(&run, workspace(json!({}))).await;
        assert!(view["binding"].is_null(), "inherited a binding: {view}");
    }
}

/// Go: TestSessionResourceBindingsStayWithinTheirAgentAndSession (internal/kernel/resource_test.go),
/// the execution branched from a named parent into a new session.
#[tokio::test]
async fn a_branch_from_a_named_parent_inherits_no_bindings() {
    let mut lab = Lab::new().await;
    let source = lab.create_in("hello", Some("main")).await;
    let run = lab.lease(&source).await;
    register(&run, workspace(json!({}))).await;
    bind(&run, "workspace", json!({"sandbox_id": "source"})).await;
    complete_execution(&run, json!({"output": {}})).await;

    let branched = lab
        .create(json!({"agent_id": "hello", "input": {}, "parent_execution_id": source, "session": "branched"}))
        .await;
    let run = lab.lease(&id_of(&branched)).await;
    let view = register(&run, workspace(json!({}))).await;
    assert!(view["binding"].is_null(), "inherited a binding: {view}");
}

/// Go: TestForkRestoresEachResourceFromItsNewestCheckpointByTheForkPoint (internal/kernel/resource_test.go)
#[tokio::test]
async fn fork_restores_each_resource_from_its_newest_checkpoint_by_the_fork_point() {
    let mut lab = Lab::new().await;
    let policy = workspace(json!({"coverage_reuse": true, "every_steps": 2}));
    let source = lab.create_in("hello", Some("main")).await;
    let run = lab.lease(&source).await;
    register(&run, policy.clone()).await;
    bind(&run, "workspace", json!({"sandbox_id": "sbx-1"})).await;
    publish_workspace(&run, 0, "s0").await;
    let baseline = lab.latest(&source);

    let first = run.submit(declaring("write", &["workspace"])).await;
    let resources = touched(&first);
    assert_eq!(resources.len(), 1, "{first}");
    assert_eq!(resources[0]["generation"], 1);
    assert_ne!(resources[0]["due"], true, "{first}");
    complete_tool(&run, &first, "").await;
    let uncaptured = lab.latest(&source);

    let second = run.submit(declaring("write", &["workspace"])).await;
    assert_eq!(touched(&second)[0]["due"], true, "{second}");
    complete_tool(&run, &second, "s2").await;

    for read in [
        json!({"kind": "tool_call", "target": "read", "args": {}}),
        declaring("read", &[]),
    ] {
        let decision = run.submit(read).await;
        assert!(touched(&decision).is_empty(), "{decision}");
        complete_tool(&run, &decision, "").await;
    }
    let after_read = lab.latest(&source);

    let (uncovered, forked) = lab.fork(&source, json!({"at_seq": uncaptured})).await;
    let restoration = &forked["restoration"]["workspace"];
    assert_eq!(restoration["checkpoint_ref"], "s0", "{forked}");
    assert_eq!(restoration["checkpoint_seq"], baseline - 1, "{forked}");
    assert_eq!(restoration["covered"], false, "{forked}");
    let uncovered_run = lab.lease(&uncovered).await;
    let view = register(&uncovered_run, policy.clone()).await;
    assert_eq!(view["checkpoint_ref"], "s0", "{view}");
    assert!(view["binding"].is_null(), "{view}");
    assert_eq!(
        (
            view["count"].clone(),
            view["generation"].clone(),
            view["covered"].clone()
        ),
        (json!(1), json!(2), json!(false)),
        "resource forked between checkpoints: {view}"
    );
    let boundary = lab.latest(&uncovered);
    publish_workspace(&uncovered_run, 2, "restored").await;
    assert!(!lab.covered_at(&uncovered, boundary - 1).await);
    assert!(lab.covered_at(&uncovered, lab.latest(&uncovered)).await);

    let (fork_id, forked) = lab.fork(&source, json!({"at_seq": after_read})).await;
    let restoration = &forked["restoration"]["workspace"];
    assert_eq!(
        (
            restoration["covered"].clone(),
            restoration["checkpoint_ref"].clone()
        ),
        (json!(true), json!("s2")),
        "{forked}"
    );
    assert!(lab.get(&fork_id).await.get("restoration").is_none());
    let fork_run = lab.lease(&fork_id).await;
    let view = register(&fork_run, policy).await;
    assert_eq!(view["checkpoint_ref"], "s2", "{view}");
    assert!(view["binding"].is_null(), "{view}");
    assert_eq!(
        (
            view["count"].clone(),
            view["generation"].clone(),
            view["covered"].clone()
        ),
        (json!(2), json!(2), json!(true)),
        "forked resource: {view}"
    );
    let copied = fork_run.submit(declaring("write", &["workspace"])).await;
    assert_eq!(copied["decision"], "replay");
    assert!(touched(&copied).is_empty(), "{copied}");
    assert!(lab.covered_at(&fork_id, lab.latest(&fork_id)).await);
}

/// Go: TestCaptureThatNoLongerDescribesItsResourceIsRefused (internal/kernel/resource_test.go)
#[tokio::test]
async fn a_capture_that_no_longer_describes_its_resource_is_refused() {
    let mut lab = Lab::new().await;
    let exec = lab.create_in("hello", None).await;
    let run = lab.lease(&exec).await;
    register(&run, workspace(json!({"coverage_reuse": true}))).await;

    let stale = run.submit(declaring("write", &["workspace"])).await;
    let old = json!({"result": "ok", "captures": [{"key": "workspace", "generation": 0, "checkpoint_ref": "old"}]});
    run.complete(step_id(&stale), old).await;

    let a = run.submit(declaring("a", &["workspace"])).await;
    let b = run.submit(declaring("b", &["workspace"])).await;
    let racing = json!({"result": "ok", "captures": [
        {"key": "workspace", "generation": touched(&b)[0]["generation"], "checkpoint_ref": "racing"}
    ]});
    run.complete(step_id(&a), racing).await;

    assert_eq!(
        refusals(&lab.kernel, &exec),
        ["stale_generation", "writers_active"]
    );
    let (_, step) = run
        .api
        .send(
            "GET",
            &format!("/v0/executions/{exec}/steps/{}", step_id(&a)),
            None,
            "",
        )
        .await;
    assert_eq!(step["status"], "succeeded", "{step}");
    assert!(!lab.covered_at(&exec, lab.latest(&exec)).await);
}

/// Go: TestLLMStepEndsCoverageOnlyWithoutCoverageReuse (internal/kernel/resource_test.go)
#[tokio::test]
async fn an_llm_step_ends_coverage_only_without_coverage_reuse() {
    for reuse in [true, false] {
        let mut lab = Lab::new().await;
        let exec = lab.create_in("hello", None).await;
        let run = lab.lease(&exec).await;
        register(&run, workspace(json!({"coverage_reuse": reuse}))).await;
        publish_workspace(&run, 0, "s0").await;
        let llm = run
            .submit(json!({"kind": "llm_call", "target": "model", "args": {}}))
            .await;
        assert_eq!(llm["decision"], "proceed");
        assert_eq!(
            lab.covered_at(&exec, lab.latest(&exec)).await,
            reuse,
            "coverage_reuse={reuse}"
        );
        assert_eq!(
            touched(&llm).is_empty(),
            reuse,
            "coverage_reuse={reuse}: {llm}"
        );
    }
}

/// Go: TestStepDeclaringAnUnregisteredResourceIsRejected (internal/kernel/resource_test.go)
#[tokio::test]
async fn a_step_declaring_an_unregistered_resource_is_rejected() {
    let mut lab = Lab::new().await;
    let exec = lab.create_in("hello", None).await;
    let run = lab.lease(&exec).await;
    let body = declaring("write", &["workspace"]).to_string();
    let (status, answer) = run.post("/steps", &body).await;
    assert_eq!(
        (status, answer["code"].clone()),
        (400, json!("validation_error")),
        "{answer}"
    );
}

/// Go: TestForkWithoutACheckpointUsesTheInitialEnvironment (internal/kernel/resource_test.go)
#[tokio::test]
async fn fork_without_a_checkpoint_uses_the_initial_environment() {
    let mut lab = Lab::new().await;
    let exec = lab.create_in("hello", None).await;
    let run = lab.lease(&exec).await;
    let policy = workspace(json!({"coverage_reuse": true}));
    register(&run, policy.clone()).await;
    let (fork_id, fork) = lab.fork(&exec, json!({"at_seq": lab.latest(&exec)})).await;
    assert_eq!(
        fork["restoration"],
        json!({"workspace": {"covered": false}}),
        "{fork}"
    );
    let fork_run = lab.lease(&fork_id).await;
    let view = register(&fork_run, policy).await;
    assert!(view["checkpoint_ref"].is_null(), "{view}");
    assert!(view["binding"].is_null(), "{view}");
    assert_eq!(
        (
            view["generation"].clone(),
            view["count"].clone(),
            view["covered"].clone()
        ),
        (json!(1), json!(0), json!(false)),
        "{view}"
    );
}

/// Go: TestForkAtACapturedOutcomeLogsItsCheckpoint (internal/kernel/resource_test.go)
#[tokio::test]
async fn fork_at_a_captured_outcome_logs_its_checkpoints() {
    let mut lab = Lab::new().await;
    let exec = lab.create_in("hello", None).await;
    let run = lab.lease(&exec).await;
    register(&run, workspace(json!({"coverage_reuse": true}))).await;
    publish_workspace(&run, 0, "s0").await;
    let write = run.submit(declaring("write", &["workspace"])).await;
    complete_tool(&run, &write, "s1").await;
    let outcome = lab.latest(&exec) - 1;

    let (fork_id, _) = lab.fork(&exec, json!({"at_seq": outcome})).await;
    let refs: Vec<Value> = events_of(&lab.kernel, &fork_id, "resource.checkpointed")
        .iter()
        .map(|e| e.payload["checkpoint_ref"].clone())
        .collect();
    assert_eq!(refs, [json!("s0"), json!("s1")]);
    let executing = events_of(&lab.kernel, &fork_id, "step.executing");
    let generations = &executing.last().unwrap().payload["generations"];
    assert_eq!(generations["workspace"], 1, "{generations}");
}

/// Go: TestRepeatedRegistrationKeepsItsPolicyAndRefusesAnotherDriverOrCapability (internal/kernel/resource_test.go)
#[tokio::test]
async fn a_repeated_registration_keeps_its_policy_and_refuses_another_driver_or_capability() {
    let mut lab = Lab::new().await;
    let exec = lab.create_in("hello", None).await;
    let run = lab.lease(&exec).await;
    register(&run, workspace(json!({"every_steps": 5}))).await;
    let again = register(&run, workspace(json!({"every_steps": 1}))).await;
    assert_eq!(again["every_steps"], 5, "{again}");
    for (what, body) in [
        (
            "driver",
            json!({"key": "workspace", "driver_id": "other.v1"}),
        ),
        ("coverage reuse", workspace(json!({"coverage_reuse": true}))),
    ] {
        let (status, answer) = run.post("/resources", &body.to_string()).await;
        assert_eq!(status, 409, "another {what}: {answer}");
    }
}

/// Go: TestRerunOfAnOrphanedStepRefusesCapturesFromItsFirstAttempt (internal/kernel/resource_test.go)
#[tokio::test]
async fn a_rerun_of_an_orphaned_step_refuses_captures_from_its_first_attempt() {
    let mut lab = Lab::new().await;
    let exec = lab.create_in("hello", None).await;
    let run = lab.lease(&exec).await;
    let policy = workspace(json!({"coverage_reuse": true}));
    register(&run, policy.clone()).await;

    let first = run.submit(declaring("write", &["workspace"])).await;
    lab.kernel.redeliver(&exec).unwrap();
    let again = lab.lease(&exec).await;
    let rerun = again.submit(declaring("write", &["workspace"])).await;
    let first_generation = touched(&first)[0]["generation"].as_u64().unwrap();
    assert_eq!(rerun["decision"], "proceed");
    assert_eq!(rerun["step_id"], first["step_id"]);
    assert_eq!(touched(&rerun)[0]["generation"], first_generation + 1);

    let body = json!({"result": "ok", "captures": [
        {"key": "workspace", "generation": first_generation, "checkpoint_ref": "first-attempt"}
    ]});
    again.complete(step_id(&rerun), body).await;
    assert!(!lab.covered_at(&exec, lab.latest(&exec)).await);
    let view = register(&again, policy).await;
    assert_eq!(view["count"], 1, "a rerun step counts once: {view}");
}

/// Go: TestForkKeepsTheNewestCheckpointAtTheSameCopiedBoundary (internal/kernel/resource_test.go)
#[tokio::test]
async fn fork_keeps_the_newest_checkpoint_at_the_same_copied_boundary() {
    let mut lab = Lab::new().await;
    let exec = lab.create_in("hello", None).await;
    let run = lab.lease(&exec).await;
    let policy = workspace(json!({"coverage_reuse": true}));
    register(&run, policy.clone()).await;
    publish_workspace(&run, 0, "first").await;
    publish_workspace(&run, 0, "latest").await;

    let (fork_id, _) = lab.fork(&exec, json!({"at_seq": lab.latest(&exec)})).await;
    let fork_run = lab.lease(&fork_id).await;
    let view = register(&fork_run, policy).await;
    assert_eq!(
        (view["checkpoint_ref"].clone(), view["covered"].clone()),
        (json!("latest"), json!(true)),
        "{view}"
    );
    let points = lab.fork_points(&fork_id).await;
    let checkpoints = points["checkpoints"].as_array().unwrap();
    assert_eq!(checkpoints.len(), 1, "{points}");
    assert_eq!(checkpoints[0]["checkpoint_ref"], "latest");
}

/// Go: TestForkOfAnUncoveredForkKeepsItsBaselineAfterTheCopiedSteps (internal/kernel/resource_test.go)
#[tokio::test]
async fn a_fork_of_an_uncovered_fork_keeps_its_baseline_after_the_copied_steps() {
    let mut lab = Lab::new().await;
    let policy = workspace(json!({"coverage_reuse": true, "every_steps": 5}));
    let source = lab.create_in("hello", None).await;
    let run = lab.lease(&source).await;
    register(&run, policy.clone()).await;
    publish_workspace(&run, 0, "s0").await;
    let write = run.submit(declaring("write", &["workspace"])).await;
    complete_tool(&run, &write, "").await;

    let (child, _) = lab
        .fork(&source, json!({"at_seq": lab.latest(&source)}))
        .await;
    let child_run = lab.lease(&child).await;
    let view = register(&child_run, policy.clone()).await;
    publish_workspace(&child_run, view["generation"].as_u64().unwrap(), "restored").await;

    let (grandchild, forked) = lab
        .fork(&child, json!({"at_seq": lab.latest(&child)}))
        .await;
    let grandchild_run = lab.lease(&grandchild).await;
    let view = register(&grandchild_run, policy).await;
    assert_eq!(
        forked["restoration"]["workspace"]["covered"], true,
        "{forked}"
    );
    assert_eq!(
        (view["checkpoint_ref"].clone(), view["covered"].clone()),
        (json!("restored"), json!(true)),
        "{view}"
    );
    for succeeded in events_of(&lab.kernel, &grandchild, "step.succeeded") {
        assert!(
            !lab.covered_at(&grandchild, succeeded.event_seq).await,
            "a copied outcome the child's restored state lacks is covered"
        );
    }
}

/// Go: TestForkPointsWithoutResources (internal/kernel/resource_test.go)
#[tokio::test]
async fn fork_points_without_resources() {
    let mut lab = Lab::new().await;
    let exec = lab.create_in("hello", None).await;
    let run = lab.lease(&exec).await;
    let read = run
        .submit(json!({"kind": "tool_call", "target": "read", "args": {}}))
        .await;
    complete_tool(&run, &read, "").await;
    let latest = lab.latest(&exec);
    let points = lab.fork_points(&exec).await;
    assert_eq!(
        points,
        json!({"latest_seq": latest, "resources": {}, "checkpoints": []})
    );
    let (_, fork) = lab.fork(&exec, json!({"at_seq": latest})).await;
    let restoration = fork.get("restoration").cloned().unwrap_or(json!({}));
    assert!(restoration.is_null() || restoration == json!({}), "{fork}");
}

/// Go: TestForkSelectsIndependentResourceStatesAndExcludesLaterRegistrations (internal/kernel/resource_test.go)
#[tokio::test]
async fn fork_selects_independent_resource_states_and_excludes_later_registrations() {
    let mut lab = Lab::new().await;
    let exec = lab.create_in("hello", None).await;
    let run = lab.lease(&exec).await;
    register(
        &run,
        workspace(json!({"coverage_reuse": true, "every_steps": 5})),
    )
    .await;
    publish_workspace(&run, 0, "workspace-before-write").await;
    let write = run.submit(declaring("write", &["workspace"])).await;
    complete_tool(&run, &write, "").await;
    register(
        &run,
        json!({"key": "database", "driver_id": "test.v1", "coverage_reuse": true}),
    )
    .await;
    publish(
        &run,
        json!([{"key": "database", "generation": 0, "checkpoint_ref": "database-baseline"}]),
    )
    .await;
    let at = lab.latest(&exec);
    register(&run, json!({"key": "cache", "driver_id": "test.v1"})).await;

    let (_, fork) = lab.fork(&exec, json!({"at_seq": at})).await;
    let restoration = fork["restoration"].as_object().unwrap();
    assert_eq!(restoration.len(), 2, "{fork}");
    let (workspace, database) = (&restoration["workspace"], &restoration["database"]);
    assert_eq!(workspace["checkpoint_ref"], "workspace-before-write");
    assert_eq!(workspace["covered"], false);
    assert_eq!(database["checkpoint_ref"], "database-baseline");
    assert_eq!(database["covered"], true);
    assert!(
        workspace["checkpoint_seq"].as_u64().unwrap()
            < database["checkpoint_seq"].as_u64().unwrap()
    );
    assert_eq!(
        fork["fork_seq"], at,
        "the uncovered fork keeps the requested boundary"
    );
    assert!(!lab.covered_at(&exec, at).await);
}

// ---------------------------------------------------------------------------------------------
// Sessions (internal/kernel/session_test.go)

fn kinds(kernel: &DevKernel, id: &str) -> Vec<String> {
    kernel.events(id).into_iter().map(|e| e.kind).collect()
}

/// Go: TestSessionSerializesAcrossAgents (internal/kernel/session_test.go)
#[tokio::test]
async fn a_session_serializes_across_agents() {
    let mut lab = Lab::new().await;
    let first = lab
        .create(json!({"agent_id": "hello", "session": "session-a"}))
        .await;
    let second = lab
        .create(json!({"agent_id": OTHER, "session": "session-a"}))
        .await;
    let third = lab.create_in("hello", Some("session-a")).await;
    let independent = lab.create_in("hello", Some("session-b")).await;
    assert_eq!(
        (first["status"].clone(), second["status"].clone()),
        (json!("running"), json!("pending"))
    );
    let (first, second) = (id_of(&first), id_of(&second));
    let created = &lab.kernel.events(&first)[0];
    assert_eq!(created.kind, "execution.created");
    assert_eq!(created.payload["session"], "session-a");

    let first_run = lab.lease(&first).await;
    lab.lease(&independent).await;
    assert_eq!(lab.status(&first).await, "running");
    assert_eq!(lab.status(&independent).await, "running");
    for waiter in [&second, &third] {
        assert_eq!(lab.status(waiter).await, "pending");
        assert_eq!(
            kinds(&lab.kernel, waiter),
            ["execution.created"],
            "no dispatch"
        );
    }
    let (_, page) = lab
        .call("GET", "/v0/executions?session=session-a", None)
        .await;
    assert_eq!(page["executions"].as_array().unwrap().len(), 3, "{page}");

    complete_execution(&first_run, json!({"output": {}})).await;
    assert_eq!(lab.status(&second).await, "running");
    assert_eq!(lab.status(&third).await, "pending");
    let second_run = lab.lease(&second).await;
    fail_execution(&second_run).await;
    assert_eq!(lab.status(&third).await, "running");
    let starts = kinds(&lab.kernel, &third)
        .iter()
        .filter(|k| *k == "execution.started")
        .count();
    assert_eq!(starts, 1);
}

/// Go: TestSessionRetainsOwnershipAcrossApproval (internal/kernel/session_test.go)
#[tokio::test]
async fn a_session_keeps_its_turn_across_an_approval() {
    let mut lab = Lab::new().await;
    let gate = "default_action: allow\nrules:\n  - id: approve-writes\n    when: {target: fs_write}\n    then: {decision: require_approval}\n";
    lab.kernel.set_policy("hello", gate).unwrap();
    let first = lab.create_in("hello", Some("session")).await;
    let second = lab.create_in("hello", Some("session")).await;
    let run = lab.lease(&first).await;
    let blocked = run.submit(tool("fs_write", "safe_to_retry")).await;
    assert!(blocked["approval_id"].is_string(), "{blocked}");
    assert_eq!(lab.status(&first).await, "blocked");
    assert_eq!(lab.status(&second).await, "pending");

    lab.grant(&blocked["approval_id"]).await;
    lab.lease(&first).await;
    assert_eq!(lab.status(&second).await, "pending");
    lab.cancel(&first).await;
    assert_eq!(lab.status(&second).await, "running");
}

/// Go: TestSessionCancellationAndDeadlines (internal/kernel/session_test.go). Adapted: the
/// dev kernel sets one deadline for every execution (no execution can be created already
/// overdue), so the waiter's deadline passes on a manual clock together with the running
/// execution's, and the later waiter (created half a deadline after) takes the session.
#[tokio::test]
async fn session_cancellation_and_deadlines() {
    let builder = DevKernel::builder()
        .manual_clock()
        .execution_deadline(Duration::from_secs(60));
    let mut lab = Lab::on(builder, None).await;
    let first = lab.create_in("hello", Some("session")).await;
    let cancelled = lab.create_in("hello", Some("session")).await;
    let expired = lab.create_in("hello", Some("session")).await;
    lab.lease(&first).await;
    lab.kernel.advance(Duration::from_secs(30)).unwrap();
    let next = lab.create_in("hello", Some("session")).await;

    lab.cancel(&cancelled).await;
    assert_eq!(lab.status(&cancelled).await, "cancelled");
    assert_eq!(lab.status(&first).await, "running");

    lab.kernel.advance(Duration::from_secs(31)).unwrap();
    assert_eq!(lab.status(&first).await, "cancelled");
    let got = lab.get(&expired).await;
    assert_eq!(
        (got["status"].clone(), got["failure_reason"].clone()),
        (json!("cancelled"), json!("deadline_exceeded")),
        "{got}"
    );
    assert!(
        !kinds(&lab.kernel, &expired)
            .iter()
            .any(|k| k.starts_with("dispatch.")),
        "expired waiter was dispatched: {:?}",
        kinds(&lab.kernel, &expired)
    );
    assert_eq!(lab.status(&next).await, "running");
}

/// Go: TestSessionAdmissionAcrossReplicas (internal/kernel/session_test.go). Adapted: one dev
/// kernel instead of three replicas; twelve concurrent creates in one session.
#[tokio::test]
async fn concurrent_creates_in_one_session_admit_exactly_one() {
    let mut lab = Lab::new().await;
    let url = lab.url("/v0/executions");
    let creates = (0..12).map(|_| {
        let url = url.clone();
        tokio::spawn(async move {
            let body = r#"{"agent_id": "hello", "input": {}, "session": "session"}"#;
            client("POST", &url, None, Some(body)).await
        })
    });
    for create in creates.collect::<Vec<_>>() {
        assert_eq!(create.await.unwrap().0, 201);
    }
    let (_, page) = lab
        .call("GET", "/v0/executions?session=session", None)
        .await;
    let executions = page["executions"].as_array().unwrap();
    assert_eq!(executions.len(), 12);
    let running: Vec<String> = executions
        .iter()
        .filter(|e| e["status"] == "running")
        .map(id_of)
        .collect();
    assert_eq!(running.len(), 1, "{page}");
    let run = lab.lease(&running[0].to_string()).await;
    assert_eq!(run.attempt, 1);
    let queued = events_of(&lab.kernel, &running[0].to_string(), "dispatch.queued");
    assert_eq!(queued.len(), 1);
    for waiter in executions.iter().map(id_of).filter(|id| *id != running[0]) {
        assert_eq!(kinds(&lab.kernel, &waiter), ["execution.created"]);
    }
}

/// Go: TestSessionContinuesAgentHead (internal/kernel/session_test.go)
#[tokio::test]
async fn a_session_continues_the_agents_head() {
    let mut lab = Lab::new().await;
    let previous = |id: &str| format!("/v0/executions/{id}/previous");
    let first = lab.create_in("hello", Some("chat")).await;
    assert_eq!(
        lab.call("GET", &previous(&first), None).await.1,
        json!({"state": null})
    );
    let run = lab.lease(&first).await;
    complete_execution(
        &run,
        json!({"output": {"answer": 1}, "state": {"turns": 1}}),
    )
    .await;

    let failed = lab
        .create(json!({"agent_id": "hello", "session": "chat"}))
        .await;
    assert_eq!(failed["parent_execution_id"], json!(first));
    let failed_run = lab.lease(&id_of(&failed)).await;
    fail_execution(&failed_run).await;

    let third = lab
        .create(json!({"agent_id": "hello", "session": "chat"}))
        .await;
    assert_eq!(
        third["parent_execution_id"],
        json!(first),
        "a failed execution became the head"
    );
    let third = id_of(&third);
    assert_eq!(
        lab.call("GET", &previous(&third), None).await.1,
        json!({"state": {"turns": 1}})
    );
    let started = events_of(&lab.kernel, &third, "execution.started");
    assert_eq!(started[0].payload["parent_execution_id"], json!(first));
    let third_run = lab.lease(&third).await;
    complete_execution(&third_run, json!({"output": {"answer": 3}})).await;

    let other = lab
        .create(json!({"agent_id": OTHER, "session": "chat"}))
        .await;
    assert!(
        other["parent_execution_id"].is_null(),
        "another agent's execution became the parent: {other}"
    );
    let other_run = lab.lease(&id_of(&other)).await;
    complete_execution(&other_run, json!({"output": {}})).await;
    let fourth = lab.create_in("hello", Some("chat")).await;
    assert_eq!(
        lab.call("GET", &previous(&fourth), None).await.1,
        json!({"state": {"answer": 3}})
    );
}

// ---------------------------------------------------------------------------------------------
// Subagents (internal/kernel/subagent_test.go)

/// Submits the parent's `run_subagent` step (asserting `proceed`) and returns its id.
async fn subagent_step(run: &Run, args: Value) -> String {
    let decision = run
        .submit(json!({"kind": "tool_call", "target": "run_subagent", "args": args}))
        .await;
    assert_eq!(decision["decision"], "proceed", "{decision}");
    step_id(&decision).to_owned()
}

async fn spawn_raw(lab: &Lab, parent: &str, step: &str) -> (u16, Value) {
    lab.create_raw(json!({"agent_id": "hello", "input": {},
                          "spawned_by": {"execution_id": parent, "step_id": step}}))
        .await
}

async fn spawn(lab: &Lab, parent: &str, step: &str) -> String {
    let (status, child) = spawn_raw(lab, parent, step).await;
    assert_eq!(status, 201, "{child}");
    id_of(&child)
}

async fn suspend(run: &Run) -> bool {
    let (status, body) = run.post("/suspend", "").await;
    assert_eq!(status, 200, "{body}");
    body["suspended"].as_bool().unwrap()
}

async fn step_of(lab: &Lab, run: &Run, step: &str) -> Value {
    let path = format!("/v0/executions/{}/steps/{step}", run.id);
    let (status, body) = lab.call("GET", &path, None).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Go: TestSuspendedParentResumesWhenSubagentCompletes (internal/kernel/subagent_test.go)
#[tokio::test]
async fn a_suspended_parent_resumes_when_its_subagent_completes() {
    let mut lab = Lab::new().await;
    let parent = lab.create_in("hello", None).await;
    let run = lab.lease(&parent).await;
    let step = subagent_step(&run, json!({"task": "research"})).await;
    let child = spawn(&lab, &parent, &step).await;
    assert_eq!(lab.status(&parent).await, "running");
    assert!(
        suspend(&run).await,
        "a parent with a live subagent did not suspend"
    );
    assert_eq!(lab.status(&parent).await, "blocked");
    let (status, body) = run
        .post("/steps", &tool("other", "safe_to_retry").to_string())
        .await;
    assert_ne!(status, 200, "a step on the released lease: {body}");
    assert_eq!(
        spawn(&lab, &parent, &step).await,
        child,
        "the restart spawned anew"
    );

    let child_run = lab.lease(&child).await;
    complete_execution(&child_run, json!({"output": {"answer": 42}})).await;
    assert_eq!(lab.status(&parent).await, "running");
    let resumed = lab.lease(&parent).await;
    let replay = resumed
        .submit(
            json!({"kind": "tool_call", "target": "run_subagent", "args": {"task": "research"}}),
        )
        .await;
    assert_eq!(
        (replay["decision"].clone(), replay["result"].clone()),
        (json!("replay"), json!({"answer": 42}))
    );
}

/// Go: TestSubagentCancellationFailsParentStep (internal/kernel/subagent_test.go)
#[tokio::test]
async fn cancelling_a_subagent_fails_the_parent_step() {
    let mut lab = Lab::new().await;
    let parent = lab.create_in("hello", None).await;
    let run = lab.lease(&parent).await;
    let step = subagent_step(&run, json!({})).await;
    let child = spawn(&lab, &parent, &step).await;
    suspend(&run).await;

    lab.cancel(&child).await;
    let record = step_of(&lab, &run, &step).await;
    assert_eq!(record["status"], "failed", "{record}");
    assert_eq!(record["error"]["reason"], "subagent_cancelled", "{record}");
    assert_eq!(record["error"]["execution_id"], json!(child), "{record}");
    assert_eq!(lab.status(&parent).await, "running");
}

/// Go: TestParentResumesAfterLastSubagentSettles (internal/kernel/subagent_test.go)
#[tokio::test]
async fn a_parent_resumes_after_its_last_subagent_settles() {
    let mut lab = Lab::new().await;
    let parent = lab.create_in("hello", None).await;
    let run = lab.lease(&parent).await;
    let first = subagent_step(&run, json!({"n": 1})).await;
    let second = subagent_step(&run, json!({"n": 2})).await;
    let a = spawn(&lab, &parent, &first).await;
    let b = spawn(&lab, &parent, &second).await;
    suspend(&run).await;

    let a_run = lab.lease(&a).await;
    complete_execution(&a_run, json!({"output": 1})).await;
    assert_eq!(step_of(&lab, &run, &first).await["status"], "succeeded");
    assert_eq!(lab.status(&parent).await, "blocked");
    let b_run = lab.lease(&b).await;
    complete_execution(&b_run, json!({"output": 2})).await;
    assert_eq!(lab.status(&parent).await, "running");
}

/// Go: TestSuspendAfterSubagentSettledContinues (internal/kernel/subagent_test.go)
#[tokio::test]
async fn suspending_after_the_subagent_settled_continues() {
    let mut lab = Lab::new().await;
    let parent = lab.create_in("hello", None).await;
    let run = lab.lease(&parent).await;
    let step = subagent_step(&run, json!({})).await;
    let child = spawn(&lab, &parent, &step).await;
    let child_run = lab.lease(&child).await;
    complete_execution(&child_run, json!({"output": "done"})).await;
    assert_eq!(step_of(&lab, &run, &step).await["status"], "succeeded");

    assert!(
        !suspend(&run).await,
        "suspended with no step waiting on a subagent"
    );
    assert_eq!(lab.status(&parent).await, "running");
}

/// The parent of Go's `approvalParent`: a live subagent step, then an LLM step waiting for
/// approval. Returns the lab, parent, the subagent step, the child and the approval id.
async fn approval_parent() -> (Lab, String, Run, String, String, Value) {
    let mut lab = Lab::new().await;
    let approve = "default_action: allow\nrules:\n  - id: approve-llm\n    when: {step_kind: llm_call}\n    then:\n      decision: require_approval\n      approval_config: {timeout: 1h}\n";
    lab.kernel.set_policy("hello", approve).unwrap();
    let parent = lab.create_in("hello", None).await;
    let run = lab.lease(&parent).await;
    let step = subagent_step(&run, json!({})).await;
    let child = spawn(&lab, &parent, &step).await;
    let llm = run
        .submit(json!({"kind": "llm_call", "target": "model", "args": {}}))
        .await;
    assert_eq!(llm["decision"], "blocked", "{llm}");
    let approval = llm["approval_id"].clone();
    (lab, parent, run, step, child, approval)
}

/// Go: TestBlockedParentResumesAfterApprovalAndSubagent/"subagent settles first"
/// (internal/kernel/subagent_test.go)
#[tokio::test]
async fn a_blocked_parent_resumes_after_the_subagent_then_the_approval() {
    let (mut lab, parent, run, step, child, approval) = approval_parent().await;
    let child_run = lab.lease(&child).await;
    complete_execution(&child_run, json!({"output": "done"})).await;
    assert_eq!(step_of(&lab, &run, &step).await["status"], "succeeded");
    assert_eq!(lab.status(&parent).await, "blocked");
    lab.grant(&approval).await;
    assert_eq!(lab.status(&parent).await, "running");
}

/// Go: TestBlockedParentResumesAfterApprovalAndSubagent/"approval resolves first"
/// (internal/kernel/subagent_test.go)
#[tokio::test]
async fn a_blocked_parent_resumes_after_the_approval_then_the_subagent() {
    let (mut lab, parent, _run, _step, child, approval) = approval_parent().await;
    lab.grant(&approval).await;
    assert_eq!(lab.status(&parent).await, "blocked");
    let child_run = lab.lease(&child).await;
    complete_execution(&child_run, json!({"output": "done"})).await;
    assert_eq!(lab.status(&parent).await, "running");
}

/// Go: TestSubagentRequiresExecutingParentStep (internal/kernel/subagent_test.go)
#[tokio::test]
async fn a_subagent_needs_an_executing_parent_step() {
    let mut lab = Lab::new().await;
    let parent = lab.create_in("hello", None).await;
    let run = lab.lease(&parent).await;
    let step = subagent_step(&run, json!({})).await;
    run.complete(&step, json!({"result": {}})).await;
    let (status, body) = spawn_raw(&lab, &parent, &step).await;
    assert_eq!(
        (status, body["code"].clone()),
        (409, json!("conflict")),
        "{body}"
    );
}

/// Go: TestCancellingParentCancelsSubagents (internal/kernel/subagent_test.go)
#[tokio::test]
async fn cancelling_a_parent_cancels_its_subagents_down_the_tree() {
    let mut lab = Lab::new().await;
    let parent = lab.create_in("hello", None).await;
    let run = lab.lease(&parent).await;
    let child = spawn(&lab, &parent, &subagent_step(&run, json!({})).await).await;
    let child_run = lab.lease(&child).await;
    let grandchild = spawn(&lab, &child, &subagent_step(&child_run, json!({})).await).await;

    lab.cancel(&parent).await;
    for id in [child, grandchild] {
        lab.wait_status(&id, ExecutionStatus::Cancelled).await;
        let got = lab.get(&id).await;
        assert_eq!(
            (got["status"].clone(), got["failure_reason"].clone()),
            (json!("cancelled"), json!("parent_agent_terminal")),
            "{got}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Authorization (internal/kernel/authorization_test.go)

/// Go: TestKernelRequiresPrincipalAndExecutionOwner (internal/kernel/authorization_test.go):
/// without credentials every read and agent call is `401`; signed by another agent, `403`.
#[tokio::test]
async fn calls_need_a_principal_and_the_executions_owner() {
    let token = "s3cret";
    let mut lab = Lab::on(
        DevKernel::builder().bearer_token(Some(token.into())),
        Some(token),
    )
    .await;
    let exec = lab.create_in("hello", None).await;
    let run = lab.lease(&exec).await;
    let read = tool("read", "safe_to_retry");
    let decision = run.submit(read.clone()).await;
    let step = step_id(&decision).to_owned();
    run.complete(&step, json!({"result": {"private": true}}))
        .await;

    let base = format!("/v0/executions/{exec}");
    let calls: Vec<(&str, &str, String, String)> = vec![
        ("execution", "GET", base.clone(), String::new()),
        ("steps", "GET", format!("{base}/steps"), String::new()),
        ("step", "GET", format!("{base}/steps/{step}"), String::new()),
        (
            "submit replay",
            "POST",
            format!("{base}/steps"),
            read.to_string(),
        ),
        (
            "complete replay",
            "POST",
            format!("{base}/steps/{step}/complete"),
            r#"{"result": {}}"#.into(),
        ),
        (
            "fail replay",
            "POST",
            format!("{base}/steps/{step}/fail"),
            r#"{"error": "x"}"#.into(),
        ),
        (
            "heartbeat",
            "POST",
            format!("{base}/heartbeat"),
            String::new(),
        ),
        (
            "complete execution",
            "POST",
            format!("{base}/complete"),
            "{}".into(),
        ),
        (
            "fail execution",
            "POST",
            format!("{base}/fail"),
            r#"{"error": "failed"}"#.into(),
        ),
    ];
    let mut foreign = AgentClient::new(&lab.kernel.url());
    foreign.agent_id = OTHER.into();
    let lease = Some((run.dispatch.as_str(), run.attempt));
    for (name, method, path, body) in &calls {
        let body = (!body.is_empty()).then_some(body.as_str());
        let (status, answer) = client(method, &lab.url(path), None, body).await;
        assert_eq!(status, 401, "missing principal, {name}: {answer}");
        let body = body.unwrap_or_default();
        let lease = if *method == "GET" { None } else { lease };
        let (status, answer) = foreign.send(method, path, lease, body).await;
        assert_eq!(status, 403, "foreign agent, {name}: {answer}");
    }
    let (status, owned) = run
        .api
        .send("GET", &format!("{base}/steps/{step}"), None, "")
        .await;
    assert_eq!(status, 200, "{owned}");
}

// ---------------------------------------------------------------------------------------------
// Policy tests (internal/kernel/policytest_test.go)

async fn test_policy(lab: &Lab, agent: &str, body: Value) -> (u16, Value) {
    lab.call("POST", &format!("/v0/policies/{agent}/test"), Some(body))
        .await
}

/// Go: TestTestPolicyReplaysRecordedSteps (internal/kernel/policytest_test.go)
#[tokio::test]
async fn a_policy_test_replays_recorded_steps() {
    let mut lab = Lab::new().await;
    let exec = lab.create_in("hello", None).await;
    let run = lab.lease(&exec).await;
    run.submit(json!({"kind": "tool_call", "target": "read", "args": {"path": "/tmp"}}))
        .await;

    let (status, report) = test_policy(
        &lab,
        "hello",
        json!({"bundle": "default_action: deny\n", "execution_id": exec}),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{report}");
    let result = &results[0];
    assert_eq!(result["pass"], false);
    assert_eq!(result["failure"], "deny, want allow");
    assert_eq!(result["target"], "read");
    assert_eq!(result["args"]["path"], "/tmp");
    assert_eq!(result["was_rule"], "permissive");
}

/// Go: TestTestPolicyRejectsBadRequests (internal/kernel/policytest_test.go)
#[tokio::test]
async fn a_policy_test_rejects_bad_requests() {
    let lab = Lab::new().await;
    let (status, body) =
        test_policy(&lab, "hello", json!({"bundle": "rules:\n  - when: {}\n"})).await;
    assert_eq!(status, 400, "a rule without an id: {body}");
    let (status, body) =
        test_policy(&lab, "nope", json!({"bundle": "default_action: allow\n"})).await;
    assert_eq!(
        (status, body["code"].clone()),
        (404, json!("not_found")),
        "unknown agent: {body}"
    );
}

/// Go: TestTestPolicyReplaysSelectedExecutions (internal/kernel/policytest_test.go)
#[tokio::test]
async fn a_policy_test_replays_the_selected_executions() {
    let mut lab = Lab::new().await;
    let mut ids = Vec::new();
    for session in ["chat", "chat", "other"] {
        let exec = lab.create_in("hello", Some(session)).await;
        let run = lab.lease(&exec).await;
        run.submit(json!({"kind": "tool_call", "target": "read", "args": {}}))
            .await;
        complete_execution(&run, json!({"output": {}})).await;
        ids.push(json!(exec));
    }
    let replayed = async |selector: Value| {
        let body = json!({"bundle": "default_action: deny\n", "executions": selector});
        let (status, report) = test_policy(&lab, "hello", body).await;
        assert_eq!(status, 200, "{report}");
        report["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|result| {
                assert_eq!(result["pass"], false, "{result}");
                result["execution_id"].clone()
            })
            .collect::<Vec<Value>>()
    };
    assert_eq!(
        replayed(json!({"session": "chat"})).await,
        [ids[1].clone(), ids[0].clone()]
    );
    assert_eq!(replayed(json!({"limit": 1})).await, [ids[2].clone()]);
    let future = Timestamp::now().plus(Duration::from_secs(3600));
    assert!(replayed(json!({"since": future})).await.is_empty());
}
