//! Conformance: the Go kernel's `internal/policy` tests, replayed over the policy language
//! through the HTTP API (`POST /v0/policies/{id}`, `POST /v0/policies/{id}/test`, step
//! submissions). `/work/briefs/table-policy.md` maps every Go test function here.

use crate::common;

use crate::common::time::Timestamp;
use common::{FakeAgent, Run, SECRET, client, events_of, kernel_with_agent};
use rebuno_devkernel::{AgentSpec, DevKernel};
use serde_json::{Value, json};

/// `POST /v0/policies/hello` with `bundle`: the status and the body.
async fn load(kernel: &DevKernel, bundle: &str) -> (u16, Value) {
    let body = json!({ "bundle": bundle }).to_string();
    client(
        "POST",
        &format!("{}/v0/policies/hello", kernel.url()),
        None,
        Some(&body),
    )
    .await
}

/// `POST /v0/policies/hello/test` with `body`, asserting `200`.
async fn test_policy(kernel: &DevKernel, body: &Value) -> Value {
    let (status, report) = client(
        "POST",
        &format!("{}/v0/policies/hello/test", kernel.url()),
        None,
        Some(&body.to_string()),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    report
}

/// Evaluates `cases` against `bundle` and returns each case's `(decision, rule_id)`.
async fn decide(kernel: &DevKernel, bundle: &str, cases: Value) -> Vec<(String, String)> {
    let report = test_policy(kernel, &json!({ "bundle": bundle, "cases": cases })).await;
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["decision"].as_str().unwrap().to_owned(),
                r["rule_id"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Only the decisions of [`decide`].
async fn decisions(kernel: &DevKernel, bundle: &str, cases: Value) -> Vec<String> {
    decide(kernel, bundle, cases)
        .await
        .into_iter()
        .map(|(d, _)| d)
        .collect()
}

fn tool(target: &str, args: Value) -> Value {
    json!({"kind": "tool_call", "target": target, "args": args})
}

// ---------------------------------------------------------------------------------------------
// internal/policy/engine_test.go

/// Go: TestArgPredicateRegex (internal/policy/engine_test.go)
#[tokio::test]
async fn argument_regex_predicate_decides_the_rule() {
    let (kernel, _agent) = kernel_with_agent().await;
    let bundle = r#"
rules:
  - id: allow-prod
    when:
      arguments:
        env:
          regex: "^prod-.*"
    then:
      decision: allow
default_action: deny
"#;
    let got = decisions(
        &kernel,
        bundle,
        json!([
            {"name": "matching prod", "target": "deploy", "args": {"env": "prod-123"}},
            {"name": "non-matching staging", "target": "deploy", "args": {"env": "staging-123"}},
            {"name": "no prefix", "target": "deploy", "args": {"env": "prod"}},
        ]),
    )
    .await;
    assert_eq!(got, ["allow", "deny", "deny"]);
    kernel.shutdown().await;
}

const APPROVAL_AND_RATE_BUNDLE: &str = r"
default_action: deny
rules:
  - id: approve-writes
    when:
      target: fs_write
    then:
      decision: require_approval
      reason: writes need a human
      approval_config:
        approvers: [alice, bob]
        timeout: 5m
        message: please review
  - id: limit-search
    when:
      target: web_search
    then:
      decision: allow
      rate_limit:
        max_calls: 5
        window: 1m
        per_what: agent
        on_limiter_error: deny
";

/// Go: TestThenApprovalConfigAndRateLimitFromBundle/approval_config (internal/policy/engine_test.go)
#[tokio::test]
async fn approval_config_reaches_the_approval() {
    let (kernel, mut agent) = kernel_with_agent().await;
    assert_eq!(load(&kernel, APPROVAL_AND_RATE_BUNDLE).await.0, 204);
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    let blocked = run.submit(tool("fs_write", json!({"path": "/x"}))).await;
    assert_eq!(blocked["decision"], "blocked", "{blocked}");
    let approval_id = blocked["approval_id"].as_str().unwrap();
    let (status, approval) = client(
        "GET",
        &format!("{}/v0/approvals/{approval_id}", kernel.url()),
        None,
        None,
    )
    .await;
    assert_eq!(status, 200, "{approval}");
    assert_eq!(approval["approvers"], json!(["alice", "bob"]));
    assert_eq!(approval["message"], "please review");
    let at = |key: &str| {
        Timestamp::parse(approval[key].as_str().unwrap())
            .unwrap()
            .unix_nanos()
    };
    let timeout = at("timeout_at") - at("created_at");
    assert!(
        (299_000_000_000..=301_000_000_000).contains(&timeout),
        "timeout {timeout} ns, want 5m"
    );
    let awaiting = events_of(&kernel, &run.id, "step.awaiting_approval");
    assert_eq!(awaiting[0].payload["rule_id"], "approve-writes");
    kernel.shutdown().await;
}

/// Go: TestThenApprovalConfigAndRateLimitFromBundle/rate_limit (internal/policy/engine_test.go)
///
/// `max_calls: 5` per `1m`, counted `per_what: agent`: calls from two executions of the agent
/// share one bucket, so the sixth is refused.
#[tokio::test]
async fn rate_limit_per_agent_counts_across_executions() {
    let (kernel, mut agent) = kernel_with_agent().await;
    assert_eq!(load(&kernel, APPROVAL_AND_RATE_BUNDLE).await.0, 204);
    let first = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    let second = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    for n in 0..3 {
        let d = first.submit(tool("web_search", json!({"n": n}))).await;
        assert_eq!(d["decision"], "proceed", "{d}");
    }
    for n in 0..2 {
        let d = second.submit(tool("web_search", json!({"n": n}))).await;
        assert_eq!(d["decision"], "proceed", "{d}");
    }
    let limited = second.submit(tool("web_search", json!({"n": 9}))).await;
    assert_eq!(limited["decision"], "rate_limited", "{limited}");
    kernel.shutdown().await;
}

/// Go: TestEmptyArgPredicateIsRejectedAtLoad (internal/policy/engine_test.go), the two empty
/// predicates.
#[tokio::test]
async fn empty_argument_predicates_are_rejected_at_load() {
    let (kernel, _agent) = kernel_with_agent().await;
    for bundle in [
        "rules:\n  - id: a\n    when:\n      arguments:\n        command: {}\n    then: { decision: allow }\n",
        "rules:\n  - id: a\n    when:\n      arguments:\n        command: { equals: \"\" }\n    then: { decision: allow }\n",
    ] {
        let (status, body) = load(&kernel, bundle).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some("validation_error")),
            "{bundle}"
        );
    }
    kernel.shutdown().await;
}

/// Go: TestEmptyArgPredicateIsRejectedAtLoad (internal/policy/engine_test.go), the predicate
/// with a real constraint beside an empty one: it loads, and the constraint decides.
#[tokio::test]
async fn a_real_constraint_beside_an_empty_one_loads_and_decides() {
    let (kernel, _agent) = kernel_with_agent().await;
    let bundle = "default_action: allow\nrules:\n  - id: a\n    when:\n      arguments:\n        command: { contains: rm, equals: \"\" }\n    then: { decision: deny }\n";
    assert_eq!(load(&kernel, bundle).await.0, 204);
    let got = decide(
        &kernel,
        bundle,
        json!([
            {"target": "shell", "args": {"command": "rm -rf /"}},
            {"target": "shell", "args": {"command": "ls"}},
        ]),
    )
    .await;
    assert_eq!(
        got,
        [
            ("deny".to_owned(), "a".to_owned()),
            ("allow".to_owned(), "default".to_owned())
        ]
    );
    kernel.shutdown().await;
}

/// Go: TestRuleIDIsNotSettableFromBundle (internal/policy/engine_test.go)
#[tokio::test]
async fn rule_id_is_not_settable_from_the_bundle() {
    let (kernel, _agent) = kernel_with_agent().await;
    let forged =
        "rules:\n  - id: real-id\n    then:\n      decision: allow\n      rule_id: forged\n";
    let (status, body) = load(&kernel, forged).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("validation_error"))
    );
    let got = decide(
        &kernel,
        "rules:\n  - id: real-id\n    then: { decision: allow }\n",
        json!([{"target": "anything"}]),
    )
    .await;
    assert_eq!(got, [("allow".to_owned(), "real-id".to_owned())]);
    kernel.shutdown().await;
}

/// Go: TestLocalStepsBypassDefaultActionButNotRules (internal/policy/engine_test.go)
#[tokio::test]
async fn local_steps_bypass_default_action_but_not_rules() {
    let (kernel, _agent) = kernel_with_agent().await;
    let bundle = "default_action: deny\nrules:\n  - id: no-charging\n    when:\n      target: charge_card\n    then:\n      decision: deny\n";
    let got = decide(
        &kernel,
        bundle,
        json!([
            {"name": "unmatched local step", "kind": "local", "target": "brief_ref"},
            {"name": "unmatched tool call", "kind": "tool_call", "target": "send_email"},
            {"name": "local step a rule names", "kind": "local", "target": "charge_card"},
        ]),
    )
    .await;
    assert_eq!(
        got,
        [
            ("allow".to_owned(), "local".to_owned()),
            ("deny".to_owned(), "default".to_owned()),
            ("deny".to_owned(), "no-charging".to_owned()),
        ]
    );
    kernel.shutdown().await;
}

/// Go: TestTargetGlobsMatchAcrossSlash (internal/policy/engine_test.go)
#[tokio::test]
async fn target_globs_match_across_slash() {
    let (kernel, _agent) = kernel_with_agent().await;
    let bundle = r#"
default_action: allow
rules:
  - id: no-mcp-delete
    when:
      target: "mcp/*delete"
    then:
      decision: deny
  - id: no-openai
    when:
      targets: ["openai/gpt-?.*"]
    then:
      decision: deny
  - id: no-bracket
    when:
      target: "fs_[dr]m"
    then:
      decision: deny
  - id: no-escaped-range
    when:
      target: 'x[a\-z]'
    then:
      decision: deny
"#;
    let table = [
        ("mcp/fs_delete", "deny"),
        ("mcp/nested/fs_delete", "deny"),
        ("mcp/fs_read", "allow"),
        ("openai/gpt-5.4", "deny"),
        ("openai/gpt-54", "allow"),
        ("fs_rm", "deny"),
        ("fs_xm", "allow"),
        ("x-", "deny"),
        ("xb", "allow"),
    ];
    let cases: Vec<Value> = table
        .iter()
        .map(|(target, _)| json!({"kind": "tool_call", "target": target}))
        .collect();
    let got = decisions(&kernel, bundle, Value::Array(cases)).await;
    let got: Vec<(&str, &str)> = table
        .iter()
        .zip(&got)
        .map(|((target, _), d)| (*target, d.as_str()))
        .collect();
    assert_eq!(got, table);
    kernel.shutdown().await;
}

/// Go: TestMalformedTargetGlobIsRejectedAtLoad (internal/policy/engine_test.go)
#[tokio::test]
async fn malformed_target_globs_are_rejected_at_load() {
    let (kernel, _agent) = kernel_with_agent().await;
    for bundle in [
        "rules:\n  - id: a\n    when: { target: \"fs_[\" }\n    then: { decision: deny }\n",
        r#"rules:
  - id: a
    when: { targets: [ok, "fs_\\"] }
    then: { decision: deny }
"#,
    ] {
        let (status, body) = load(&kernel, bundle).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some("validation_error")),
            "{bundle}"
        );
    }
    kernel.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// internal/policy/tester_test.go

const SHELL_BUNDLE: &str = r"
default_action: deny
rules:
  - id: allow-llm
    when:
      step_kind: llm_call
    then:
      decision: allow
  - id: allow-safe-shell
    when:
      target: shell_exec
      arguments:
        command:
          regex: '^(ls|cat)( [^;&|]*)?$'
    then:
      decision: allow
  - id: approve-other-shell
    when:
      target: shell_exec
    then:
      decision: require_approval
";

/// Go: TestRunReportsFailuresAndUnexercisedRules (internal/policy/tester_test.go)
#[tokio::test]
async fn policy_test_reports_failures_and_unexercised_rules() {
    let (kernel, _agent) = kernel_with_agent().await;
    let body = json!({"bundle": SHELL_BUNDLE, "cases": [
        {"name": "safe", "target": "shell_exec", "args": {"command": "ls /tmp"}, "expect": "allow"},
        {"name": "chained", "target": "shell_exec", "args": {"command": "ls; rm -rf /"}, "expect": "deny"},
        {"name": "wrong rule", "target": "shell_exec", "args": {"command": "cat f"}, "expect_rule": "approve-other-shell"},
    ]});
    let report = test_policy(&kernel, &body).await;
    assert_eq!(report["failed"], 2, "{report}");
    assert_eq!(report["results"][0]["pass"], true);
    assert_eq!(
        report["results"][1]["failure"],
        "require_approval, want deny"
    );
    assert_eq!(
        report["results"][2]["failure"],
        "rule allow-safe-shell, want approve-other-shell"
    );
    assert_eq!(report["unexercised_rules"], json!(["allow-llm"]));
    kernel.shutdown().await;
}

/// Go: TestReplayCasesKeepsFirstDecision (internal/policy/tester_test.go)
///
/// A step gated on approval and then allowed replays as `require_approval` (its first
/// decision), naming the rule that gated it and carrying its arguments.
#[tokio::test]
async fn replayed_cases_keep_the_first_decision() {
    let (kernel, mut agent) = kernel_with_agent().await;
    kernel.set_policy("hello", SHELL_BUNDLE).unwrap();
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    let risky = tool("shell_exec", json!({"command": "rm -rf /"}));
    let blocked = run.submit(risky.clone()).await;
    assert_eq!(blocked["decision"], "blocked", "{blocked}");
    let s1 = blocked["step_id"].as_str().unwrap().to_owned();
    let approval = blocked["approval_id"].as_str().unwrap();
    let (status, _) = client(
        "POST",
        &format!("{}/v0/approvals/{approval}/grant", kernel.url()),
        None,
        Some(r#"{"decided_by": "alice", "rationale": "fine"}"#),
    )
    .await;
    assert_eq!(status, 204);
    let run = Run::attach(&kernel, &mut agent, &run.id).await;
    let proceed = run.submit(risky).await;
    assert_eq!(proceed["decision"], "proceed", "{proceed}");
    let safe = run
        .submit(tool("shell_exec", json!({"command": "ls"})))
        .await;
    let s2 = safe["step_id"].as_str().unwrap().to_owned();

    let report = test_policy(&kernel, &json!({"execution_id": run.id})).await;
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{report}");
    let case = |id: &str| results.iter().find(|r| r["step_id"] == id).unwrap();
    assert_eq!(case(&s1)["expect"], "require_approval");
    assert_eq!(case(&s1)["was_rule"], "approve-other-shell");
    assert_eq!(case(&s1)["args"]["command"], "rm -rf /");
    assert_eq!(case(&s2)["expect"], "allow");
    kernel.shutdown().await;
}

/// Go: TestReplayCasesSkipsKernelDecisions (internal/policy/tester_test.go)
///
/// The kernel's own refusal of an indeterminate step's retry is not a policy decision: the
/// replayed case expects nothing.
#[tokio::test]
async fn replayed_cases_skip_kernel_decisions() {
    let (kernel, mut agent) = kernel_with_agent().await;
    kernel.set_policy("hello", "default_action: allow").unwrap();
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    let pay = json!({"kind": "tool_call", "target": "pay", "args": {"n": 1}, "idempotency": "at_most_once"});
    assert_eq!(run.submit(pay.clone()).await["decision"], "proceed");
    kernel.redeliver(&run.id).unwrap();
    let run = Run::attach(&kernel, &mut agent, &run.id).await;
    assert_eq!(run.submit(pay.clone()).await["decision"], "replay");
    let denied = run.submit(pay).await;
    assert_eq!(denied["decision"], "denied", "{denied}");
    let retry = denied["step_id"].as_str().unwrap();

    let report = test_policy(&kernel, &json!({"execution_id": run.id})).await;
    let case = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["step_id"] == retry)
        .unwrap()
        .clone();
    assert_eq!(case.get("expect").and_then(Value::as_str).unwrap_or(""), "");
    kernel.shutdown().await;
}

/// Go: TestLoadCasesRejectsUnknownField (internal/policy/tester_test.go)
#[tokio::test]
async fn policy_test_cases_reject_unknown_fields() {
    let (kernel, _agent) = kernel_with_agent().await;
    let body = json!({"bundle": "default_action: allow", "cases": [{"target": "shell_exec", "expects": "allow"}]});
    let (status, answer) = client(
        "POST",
        &format!("{}/v0/policies/hello/test", kernel.url()),
        None,
        Some(&body.to_string()),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    kernel.shutdown().await;
}

/// Go: TestLoadCasesAppliesFileDefaults (internal/policy/tester_test.go)
///
/// Over HTTP the agent in the path is the default `agent_id`; `kind` defaults to
/// `tool_call`; a case's own values win.
#[tokio::test]
async fn policy_test_cases_take_defaults_unless_given() {
    let (kernel, _agent) = kernel_with_agent().await;
    let bundle = "default_action: deny\nrules:\n  - id: other-agent\n    when: { agent_id: other, step_kind: llm_call }\n    then: { decision: allow }\n";
    let report = test_policy(
        &kernel,
        &json!({"bundle": bundle, "cases": [
            {"target": "shell_exec"},
            {"target": "gpt-4o", "kind": "llm_call", "agent_id": "other"},
        ]}),
    )
    .await;
    let results = &report["results"];
    assert_eq!(
        (results[0]["agent_id"].clone(), results[0]["kind"].clone()),
        (json!("hello"), json!("tool_call"))
    );
    assert_eq!(
        (results[1]["agent_id"].clone(), results[1]["kind"].clone()),
        (json!("other"), json!("llm_call"))
    );
    assert_eq!(results[1]["rule_id"], "other-agent");
    kernel.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// internal/policy/judge_test.go (the dev kernel has no judge)

const JUDGE_BUNDLE: &str = "rules:\n  - id: shell\n    when:\n      target: bash\n    then:\n      decision: judge\n      judge:\n        threshold: 0.7\n        fallback: allow\n";

/// Go: TestJudgeRuleWithoutJudgeConfigDenies (internal/policy/judge_test.go)
///
/// Without a judge configured, a `judge` rule denies, whatever its fallback, under its own
/// rule id and the reason `judge not configured`.
#[tokio::test]
async fn judge_rule_without_a_judge_denies() {
    let (kernel, _agent) = kernel_with_agent().await;
    let (status, body) = load(&kernel, JUDGE_BUNDLE).await;
    assert_eq!(status, 204, "{body}");
    let report = test_policy(
        &kernel,
        &json!({"bundle": JUDGE_BUNDLE, "cases": [{"target": "bash"}]}),
    )
    .await;
    let result = &report["results"][0];
    assert_eq!(
        (&result["decision"], &result["rule_id"], &result["reason"]),
        (
            &json!("deny"),
            &json!("shell"),
            &json!("judge not configured")
        )
    );
    kernel.shutdown().await;
}

/// Go: TestJudgeConfigIsValidatedAtLoad (internal/policy/judge_test.go)
///
/// A `judge` block on a rule that does not decide `judge`, an unknown fallback and a threshold
/// above 1 are each refused at load, for that reason.
#[tokio::test]
async fn judge_config_is_validated_at_load() {
    let (kernel, _agent) = kernel_with_agent().await;
    for (decision, judge, reason) in [
        ("allow", "threshold: 0.7", "judge is set"),
        ("judge", "fallback: allow_all", "unknown fallback"),
        ("judge", "threshold: 70", "threshold 70"),
    ] {
        let bundle = format!(
            "rules:\n  - id: r\n    when:\n      target: bash\n    then:\n      decision: {decision}\n      judge:\n        {judge}\n"
        );
        let (status, body) = load(&kernel, &bundle).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some("validation_error")),
            "{bundle}"
        );
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.contains(reason), "{message}");
    }
    kernel.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// internal/policy/resolver_test.go

const ALLOW_WRITE: &str = "rules:\n  - id: allow-write\n    when:\n      target: write\n    then:\n      decision: allow\n";
const DENY_WRITE: &str =
    "rules:\n  - id: deny-write\n    when:\n      target: write\n    then:\n      decision: deny\n";

/// Go: TestBundleResolverEmptyBundleUsesFallback (internal/policy/resolver_test.go)
///
/// An agent with no bundle is unrestricted: its steps are allowed by `permissive`.
#[tokio::test]
async fn an_agent_without_a_bundle_is_permissive() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    let d = run.submit(tool("write", json!({}))).await;
    assert_eq!(d["decision"], "proceed", "{d}");
    let allowed = events_of(&kernel, &run.id, "step.allowed");
    assert_eq!(allowed[0].payload["rule_id"], "permissive");
    kernel.shutdown().await;
}

/// Go: TestBundleResolverPicksUpBundleChange (internal/policy/resolver_test.go)
#[tokio::test]
async fn a_new_bundle_decides_the_next_step() {
    let (kernel, mut agent) = kernel_with_agent().await;
    assert_eq!(load(&kernel, ALLOW_WRITE).await.0, 204);
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    let first = run.submit(tool("write", json!({"n": 1}))).await;
    assert_eq!(first["decision"], "proceed", "{first}");
    assert_eq!(load(&kernel, DENY_WRITE).await.0, 204);
    let second = run.submit(tool("write", json!({"n": 2}))).await;
    assert_eq!(
        (second["decision"].clone(), second["rule_id"].clone()),
        (json!("denied"), json!("deny-write"))
    );
    kernel.shutdown().await;
}

/// Go: TestBundleResolverValidBundleEvaluates (internal/policy/resolver_test.go)
///
/// The agent's own bundle decides (its allow beats the implicit default deny).
#[tokio::test]
async fn the_agents_bundle_is_evaluated() {
    let mut agent = FakeAgent::start().await;
    let kernel = DevKernel::builder()
        .agent(AgentSpec::new("hello", &agent.url, SECRET).policy_yaml(ALLOW_WRITE))
        .start()
        .await
        .unwrap();
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    let write = run.submit(tool("write", json!({}))).await;
    assert_eq!(write["decision"], "proceed", "{write}");
    let other = run.submit(tool("read", json!({}))).await;
    assert_eq!(
        (other["decision"].clone(), other["rule_id"].clone()),
        (json!("denied"), json!("default"))
    );
    let allowed = events_of(&kernel, &run.id, "step.allowed");
    assert_eq!(allowed[0].payload["rule_id"], "allow-write");
    kernel.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Pre-redesign files (arguments_test.go, loader_test.go, permissive_test.go): scenarios that
// survive in today's policy language, written in its syntax.

/// Go: TestMatchArguments_Pattern, TestMatchArguments_OneOf, TestMatchArguments_MultiplePredicates,
/// TestMatchArguments_OneOfEmptyString, TestMatchArguments_NilArguments
/// (internal/policy/arguments_test.go, pre-redesign)
///
/// Today's equivalents: `regex` and `one_of` predicates, every listed key must match, and a
/// step without arguments matches no predicate.
#[tokio::test]
async fn argument_predicates_regex_one_of_and_every_key() {
    let (kernel, _agent) = kernel_with_agent().await;
    let bundle = r#"
default_action: deny
rules:
  - id: ls-quick
    when:
      target: shell
      arguments:
        command: { regex: "^ls" }
        timeout: { one_of: ["5", "10"] }
    then: { decision: allow }
  - id: modes
    when:
      target: file
      arguments:
        mode: { one_of: ["", "read", "write"] }
    then: { decision: allow }
"#;
    let got = decisions(
        &kernel,
        bundle,
        json!([
            {"target": "shell", "args": {"command": "ls -la /tmp", "timeout": 10}},
            {"target": "shell", "args": {"command": "rm -rf /", "timeout": 10}},
            {"target": "shell", "args": {"command": "ls -la", "timeout": 60}},
            {"target": "file", "args": {"mode": "read"}},
            {"target": "file", "args": {"mode": "delete"}},
            {"target": "file", "args": {"mode": ""}},
            {"target": "shell"},
        ]),
    )
    .await;
    assert_eq!(
        got,
        ["allow", "deny", "deny", "allow", "deny", "allow", "deny"]
    );
    kernel.shutdown().await;
}

/// Go: TestParseValidationMissingRuleID, TestParseValidationDuplicateRuleID,
/// TestParseValidationInvalidDecision, TestParseValidationRequireApprovalDecision
/// (internal/policy/loader_test.go, pre-redesign); an invalid regex, which today fails the
/// load (TestMatchArguments_InvalidRegexPattern's scenario in today's language)
#[tokio::test]
async fn rule_ids_and_decisions_are_validated_at_load() {
    let (kernel, _agent) = kernel_with_agent().await;
    for bundle in [
        "rules:\n  - when: { target: x }\n    then: { decision: allow }\n",
        "rules:\n  - id: same-id\n    then: { decision: allow }\n  - id: same-id\n    then: { decision: deny }\n",
        "rules:\n  - id: bad-decision\n    then: { decision: maybe }\n",
        "rules:\n  - id: bad-regex\n    when: { arguments: { command: { regex: \"[invalid(\" } } }\n    then: { decision: allow }\n",
    ] {
        let (status, body) = load(&kernel, bundle).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some("validation_error")),
            "{bundle}"
        );
    }
    let approval = "rules:\n  - id: needs-approval\n    when: { target: deploy }\n    then: { decision: require_approval, reason: needs human sign-off }\n";
    assert_eq!(load(&kernel, approval).await.0, 204);
    let got = decide(&kernel, approval, json!([{"target": "deploy"}])).await;
    assert_eq!(
        got,
        [("require_approval".to_owned(), "needs-approval".to_owned())]
    );
    kernel.shutdown().await;
}

/// Go: TestAgentEngineRoutesToCorrectAgent (internal/policy/loader_test.go, pre-redesign)
///
/// Today each agent carries its own bundle: each agent's steps meet only its own rules.
#[tokio::test]
async fn each_agent_is_decided_by_its_own_bundle() {
    let (kernel, _agent) = kernel_with_agent().await;
    let agent = FakeAgent::start().await;
    kernel
        .register_agent(AgentSpec::new("shell", &agent.url, SECRET).policy_yaml(
            "rules:\n  - id: allow-shell\n    when: { target: shell.exec }\n    then: { decision: allow }\n",
        ))
        .unwrap();
    kernel
        .set_policy(
            "hello",
            "rules:\n  - id: allow-web\n    when: { target: web.search }\n    then: { decision: allow }\n",
        )
        .unwrap();
    let cases = json!({"cases": [{"target": "web.search"}, {"target": "shell.exec"}]});
    let mut got = Vec::new();
    for agent_id in ["hello", "shell"] {
        let (status, report) = client(
            "POST",
            &format!("{}/v0/policies/{agent_id}/test", kernel.url()),
            None,
            Some(&cases.to_string()),
        )
        .await;
        assert_eq!(status, 200, "{report}");
        for r in report["results"].as_array().unwrap() {
            got.push(r["decision"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(got, ["allow", "deny", "deny", "allow"]);
    kernel.shutdown().await;
}

/// Go: TestAgentEngineGlobalAgentIDsScoping (internal/policy/loader_test.go, pre-redesign)
///
/// `agent_ids` and a target glob in one rule: both must hold.
#[tokio::test]
async fn agent_ids_and_a_target_glob_combine() {
    let (kernel, _agent) = kernel_with_agent().await;
    let bundle = "default_action: deny\nrules:\n  - id: research-agents-web\n    when:\n      agent_ids: [researcher, analyst]\n      target: \"web.*\"\n    then: { decision: allow, reason: research agents can use web tools }\n";
    let got = decide(
        &kernel,
        bundle,
        json!([
            {"agent_id": "analyst", "target": "web.search"},
            {"agent_id": "deploy-bot", "target": "web.search"},
            {"agent_id": "researcher", "target": "shell.exec"},
        ]),
    )
    .await;
    assert_eq!(
        got,
        [
            ("allow".to_owned(), "research-agents-web".to_owned()),
            ("deny".to_owned(), "default".to_owned()),
            ("deny".to_owned(), "default".to_owned()),
        ]
    );
    kernel.shutdown().await;
}
