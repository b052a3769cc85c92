//! `POST /v0/policies/{agent_id}/test` over HTTP (PROTOCOL.md §2.7).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Run, client, kernel_with_agent};
use serde_json::json;

const BUNDLE: &str = "default_action: deny
rules:
  - id: search
    when: {target: search}
    then: {decision: allow}
  - id: deploy
    when: {target: deploy}
    then: {decision: require_approval}
";

#[tokio::test]
async fn cases_replays_and_backtests() {
    let (kernel, mut agent) = kernel_with_agent().await;
    let url = format!("{}/v0/policies/hello/test", kernel.url());
    // No bundle stored and none given.
    let (status, _) = client("POST", &url, None, Some(r#"{"cases":[{"target":"x"}]}"#)).await;
    assert_eq!(status, 400);
    kernel.set_policy("hello", BUNDLE).unwrap();

    let body = json!({"cases": [
        {"name": "search is fine", "target": "search", "args": {"q": 1}, "expect": "allow"},
        {"target": "rm", "expect": "allow"},
        {"target": "deploy", "expect_rule": "deploy"},
    ]});
    let (status, report) = client("POST", &url, None, Some(&body.to_string())).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["failed"], 1);
    let results = report["results"].as_array().unwrap();
    assert_eq!(results[0]["decision"], "allow");
    assert_eq!(results[0]["pass"], true);
    assert_eq!(results[0]["name"], "search is fine");
    assert_eq!(results[0]["agent_id"], "hello");
    assert_eq!(results[0]["kind"], "tool_call");
    assert_eq!(results[1]["failure"], "deny, want allow");
    assert_eq!(results[1]["rule_id"], "default");
    assert_eq!(results[2]["decision"], "require_approval");
    assert!(report.get("unexercised_rules").is_none());

    // Replay a recorded execution against a stricter candidate bundle.
    let run = Run::start(&kernel, &mut agent, r#"{"agent_id":"hello"}"#).await;
    let allowed = run
        .submit(json!({"kind": "tool_call", "target": "search", "args": {"q": 1}}))
        .await;
    let denied = run
        .submit(json!({"kind": "tool_call", "target": "rm", "args": {}}))
        .await;
    let candidate = "default_action: deny\nrules:\n  - id: nothing\n    when: {target: none}\n    then: {decision: allow}\n";
    let body = json!({"bundle": candidate, "execution_id": run.id});
    let (status, report) = client("POST", &url, None, Some(&body.to_string())).await;
    assert_eq!(status, 200, "{report}");
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    let search = results
        .iter()
        .find(|r| r["step_id"] == allowed["step_id"])
        .unwrap();
    assert_eq!(
        (search["expect"].clone(), search["was_rule"].clone()),
        (json!("allow"), json!("search"))
    );
    assert_eq!(search["pass"], false);
    let rm = results
        .iter()
        .find(|r| r["step_id"] == denied["step_id"])
        .unwrap();
    assert_eq!(rm["pass"], true);
    assert_eq!(report["failed"], 1);
    assert_eq!(report["unexercised_rules"], json!(["nothing"]));

    // Backtest over the agent's executions.
    let body = json!({"executions": {"limit": 5}});
    let (_, report) = client("POST", &url, None, Some(&body.to_string())).await;
    assert_eq!(report["results"].as_array().unwrap().len(), 2);
    assert_eq!(report["failed"], 0);
    let body = json!({"executions": {"session": "none"}});
    let (_, report) = client("POST", &url, None, Some(&body.to_string())).await;
    assert_eq!(report["results"], json!([]));

    // Errors.
    let missing = format!("{}/v0/policies/nobody/test", kernel.url());
    assert_eq!(client("POST", &missing, None, Some("{}")).await.0, 404);
    let bad = json!({"bundle": "rules: [{when: {}}]"}).to_string();
    assert_eq!(client("POST", &url, None, Some(&bad)).await.0, 400);
    let unknown = json!({"execution_id": uuid::Uuid::now_v7()}).to_string();
    assert_eq!(client("POST", &url, None, Some(&unknown)).await.0, 404);
    let bad_case = json!({"cases": [{"target": "x", "kind": "shell"}]}).to_string();
    assert_eq!(client("POST", &url, None, Some(&bad_case)).await.0, 400);

    // Both scopes are needed.
    let only_write = kernel.create_api_key("w", &["policies:write"]).unwrap();
    assert_eq!(
        client("POST", &url, Some(&only_write), Some("{}")).await.0,
        403
    );
    let both = kernel
        .create_api_key("b", &["policies:write", "executions:read"])
        .unwrap();
    assert_eq!(client("POST", &url, Some(&both), Some("{}")).await.0, 200);
}
