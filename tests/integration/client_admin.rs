//! The client's operator calls, over real HTTP with the dev kernel: agents registered, read and
//! deleted; policy bundles set and tested against cases and recorded executions; scoped API
//! keys created, used, rotated and revoked; a completed turn continued into a new session; and
//! a front door's retried creation made idempotent with its request id.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use rebuno::client::{Client, ExecutionSelector, PolicyCase, PolicyDecision, Scope};
use rebuno::wire::ExecutionStatus;
use rebuno::{Agent, ErrorKind, HandlerError, define_tool, execution, previous};
use rebuno_devkernel::DevKernel;
use serde_json::{Value, json};

use crate::support::{WAIT, trace_init};

const TOKEN: &str = "the-bootstrap-token";

const POLICY: &str = r#"
default_action: allow
rules:
  - id: no-shell
    when: { target: shell }
    then: { decision: deny, reason: "shell is off limits" }
  - id: mail-needs-a-human
    when: { target: send_email }
    then: { decision: require_approval }
"#;

/// The same bundle, with searching denied.
const STRICTER: &str = r#"
default_action: allow
rules:
  - id: no-search
    when: { target: search }
    then: { decision: deny }
"#;

async fn kernel() -> DevKernel {
    DevKernel::builder()
        .bearer_token(Some(TOKEN.to_owned()))
        .start()
        .await
        .unwrap()
}

fn client(kernel: &DevKernel, key: impl Into<rebuno::Secret>) -> Client {
    Client::builder()
        .base_url(kernel.url())
        .api_key(key)
        .max_attempts(1)
        .build()
        .unwrap()
}

/// The kind and code of an error (`Api`, `not_found`), for comparing.
fn what(error: &rebuno::Error) -> (ErrorKind, Option<&str>) {
    (error.kind(), error.code())
}

#[tokio::test]
async fn agents_are_registered_read_and_deleted() {
    let kernel = kernel().await;
    let admin = client(&kernel, TOKEN);
    let registration = admin
        .register_agent("hello", "http://127.0.0.1:9/webhook", "s3cret-value")
        .lease_timeout_seconds(30);
    assert!(!format!("{registration:?}").contains("s3cret"));
    let stored = registration.send().await.unwrap();
    assert_eq!(
        (stored.id.as_str(), stored.webhook_url.as_str()),
        ("hello", "http://127.0.0.1:9/webhook")
    );
    assert_eq!(stored.lease_timeout_seconds, Some(30));

    assert_eq!(admin.agent("hello").await.unwrap(), stored);
    let ids: Vec<String> = admin
        .agents()
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.id)
        .collect();
    assert_eq!(ids, ["hello"]);

    admin.delete_agent("hello").await.unwrap();
    admin.delete_agent("hello").await.unwrap();
    let gone = admin.agent("hello").await.unwrap_err();
    assert_eq!(what(&gone), (ErrorKind::Api, Some("not_found")), "{gone}");
    let blank = admin
        .register_agent("hello", " ", "s")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        what(&blank),
        (ErrorKind::Api, Some("validation_error")),
        "{blank}"
    );
}

#[tokio::test]
async fn a_key_without_the_scope_is_forbidden() {
    let kernel = kernel().await;
    let admin = client(&kernel, TOKEN);
    let issued = admin
        .create_api_key("reader")
        .scope(Scope::AgentsRead)
        .send()
        .await
        .unwrap();
    let reader = client(&kernel, issued.token);
    reader.agents().await.unwrap();
    let refused = reader
        .register_agent("hello", "http://127.0.0.1:9/webhook", "s")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        what(&refused),
        (ErrorKind::Api, Some("forbidden")),
        "{refused}"
    );
    assert_eq!(refused.status().map(|s| s.as_u16()), Some(403));
    for refused in [
        reader.set_policy("hello", POLICY).await.unwrap_err(),
        reader.api_keys().await.map(drop).unwrap_err(),
        reader.create("hello").send().await.map(drop).unwrap_err(),
    ] {
        assert_eq!(
            what(&refused),
            (ErrorKind::Api, Some("forbidden")),
            "{refused}"
        );
    }
}

#[tokio::test]
async fn api_keys_are_created_listed_rotated_and_revoked() {
    let kernel = kernel().await;
    let admin = client(&kernel, TOKEN);
    let issued = admin
        .create_api_key("ci")
        .scope(Scope::ExecutionsRead)
        .scope(Scope::AgentsRead)
        .scope(Scope::AgentsRead)
        .send()
        .await
        .unwrap();
    assert_eq!(
        issued.key.scopes,
        [Scope::AgentsRead, Scope::ExecutionsRead]
    );
    let token = String::from_utf8(issued.token.expose().to_vec()).unwrap();
    assert!(token.starts_with("rbk_"), "a key token");
    assert!(!format!("{issued:?}").contains(&token), "{issued:?}");
    client(&kernel, token.as_str()).agents().await.unwrap();

    let listed = admin.api_keys().await.unwrap();
    assert_eq!(listed, std::slice::from_ref(&issued.key));

    let rotated = admin.rotate_api_key(&issued.key.id).await.unwrap();
    assert_eq!(rotated.key.id, issued.key.id);
    let old = client(&kernel, token.as_str()).agents().await.unwrap_err();
    assert_eq!(old.kind(), ErrorKind::Unauthorized, "{old}");
    let fresh = client(&kernel, rotated.token.clone());
    fresh.agents().await.unwrap();

    admin.revoke_api_key(&issued.key.id).await.unwrap();
    admin.revoke_api_key(&issued.key.id).await.unwrap();
    assert_eq!(
        fresh.agents().await.unwrap_err().kind(),
        ErrorKind::Unauthorized
    );
    let listed = admin.api_keys().await.unwrap();
    assert!(listed[0].revoked_at.is_some(), "{listed:?}");
    let again = admin.rotate_api_key(&issued.key.id).await.unwrap_err();
    assert_eq!(what(&again), (ErrorKind::Api, Some("conflict")), "{again}");

    let unknown = "0192f1a0-0000-7000-8000-000000000000";
    let missing = admin.revoke_api_key(unknown).await.unwrap_err();
    assert_eq!(
        what(&missing),
        (ErrorKind::Api, Some("not_found")),
        "{missing}"
    );
    let no_scope = admin.create_api_key("none").send().await.unwrap_err();
    assert_eq!(what(&no_scope), (ErrorKind::Api, Some("validation_error")));
    let newer = admin
        .create_api_key("newer")
        .scope(Scope::Unknown("audit:read".to_owned()))
        .send()
        .await
        .unwrap_err();
    assert!(newer.to_string().contains("audit:read"), "{newer}");
}

#[tokio::test]
async fn a_policy_is_set_and_tested_against_cases() {
    let kernel = kernel().await;
    let admin = client(&kernel, TOKEN);
    admin
        .register_agent("ops", "http://127.0.0.1:9/webhook", "s")
        .send()
        .await
        .unwrap();
    let unset = admin
        .test_policy("ops")
        .case(PolicyCase::tool_call("shell"))
        .send()
        .await
        .unwrap_err();
    assert!(unset.to_string().contains("no policy bundle"), "{unset}");
    let broken = admin.set_policy("ops", "rules: [").await.unwrap_err();
    assert_eq!(
        what(&broken),
        (ErrorKind::Api, Some("validation_error")),
        "{broken}"
    );
    let unknown = admin.set_policy("nobody", POLICY).await.unwrap_err();
    assert_eq!(
        what(&unknown),
        (ErrorKind::Api, Some("not_found")),
        "{unknown}"
    );

    admin.set_policy("ops", POLICY).await.unwrap();
    assert!(admin.agent("ops").await.unwrap().policy_bundle.is_some());
    let report = admin
        .test_policy("ops")
        .case(
            PolicyCase::tool_call("shell")
                .name("no shell")
                .expect(PolicyDecision::Deny)
                .expect_rule("no-shell"),
        )
        .case(PolicyCase::tool_call("search").expect(PolicyDecision::Deny))
        .send()
        .await
        .unwrap();
    assert_eq!(report.failed, 1, "{report:?}");
    assert!(!report.passed());
    let [shell, search] = &report.results[..] else {
        panic!("two results: {report:?}");
    };
    assert!(shell.pass && shell.case.agent_id == "ops", "{shell:?}");
    assert_eq!(shell.reason.as_deref(), Some("shell is off limits"));
    assert_eq!(search.decision, PolicyDecision::Allow);
    assert_eq!(search.failure.as_deref(), Some("allow, want deny"));
    assert_eq!(report.unexercised_rules, ["mail-needs-a-human"]);

    let nobody = admin.test_policy("nobody").send().await.unwrap_err();
    assert_eq!(
        what(&nobody),
        (ErrorKind::Api, Some("not_found")),
        "{nobody}"
    );
}

#[tokio::test]
async fn a_bundle_is_tested_against_recorded_executions() {
    let _trace = trace_init();
    let kernel = kernel().await;
    let search = define_tool("search")
        .execute(|q: String| async move { Ok::<_, HandlerError>(format!("results for {q}")) });
    let served = kernel
        .serve(
            Agent::builder("researcher")
                .handler_with_state(search, |search, q: String| async move {
                    Ok::<_, HandlerError>(search.call(q).await?)
                }),
        )
        .await
        .unwrap();
    let admin = client(&kernel, TOKEN);
    admin.set_policy("researcher", POLICY).await.unwrap();
    let created = admin
        .create("researcher")
        .input(json!("rust"))
        .send()
        .await
        .unwrap();
    let done = admin.wait(&created.id, WAIT).await.unwrap();
    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );

    let same = admin
        .test_policy("researcher")
        .execution(&done.id)
        .send()
        .await
        .unwrap();
    assert!(same.passed(), "{same:?}");
    let stricter = admin
        .test_policy("researcher")
        .bundle(STRICTER)
        .execution(&done.id)
        .send()
        .await
        .unwrap();
    let [case] = &stricter.results[..] else {
        panic!("one recorded step: {stricter:?}");
    };
    assert_eq!(case.case.execution_id, done.id);
    assert_eq!(
        (case.case.target.as_str(), case.case.expect),
        ("search", Some(PolicyDecision::Allow))
    );
    assert_eq!(
        (case.decision, case.rule_id.as_str(), case.pass),
        (PolicyDecision::Deny, "no-search", false)
    );
    let recent = admin
        .test_policy("researcher")
        .bundle(STRICTER)
        .executions(ExecutionSelector::default().limit(10))
        .send()
        .await
        .unwrap();
    assert_eq!(recent.results, stricter.results);
    let unknown = "0192f1a0-0000-7000-8000-000000000000";
    let missing = admin
        .test_policy("researcher")
        .execution(unknown)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        what(&missing),
        (ErrorKind::Api, Some("not_found")),
        "{missing}"
    );
    served.shutdown().await;
}

#[tokio::test]
async fn a_completed_turn_continues_into_a_new_session() {
    let _trace = trace_init();
    let kernel = kernel().await;
    let served = kernel
        .serve(
            Agent::builder("chat").handler(|message: String| async move {
                let before = previous().await?;
                let mut history: Vec<String> =
                    serde_json::from_value(before["history"].clone()).unwrap_or_default();
                history.push(message);
                execution()?.set_state(json!({ "history": history }))?;
                Ok::<_, HandlerError>(json!(history))
            }),
        )
        .await
        .unwrap();
    let admin = client(&kernel, TOKEN);
    let mut turns = Vec::new();
    for message in ["hi", "book a table"] {
        let created = admin
            .create("chat")
            .session("u1")
            .input(json!(message))
            .send()
            .await
            .unwrap();
        turns.push(admin.wait(&created.id, WAIT).await.unwrap());
    }
    assert_eq!(turns[1].output, Some(json!(["hi", "book a table"])));

    // The user edits their second message: continue from the first turn, in a new session.
    let edited = admin
        .create("chat")
        .parent_execution_id(&turns[0].id)
        .session("u1:edit")
        .input(json!("book a taxi"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        edited.parent_execution_id.as_deref(),
        Some(turns[0].id.as_str())
    );
    let edited = admin.wait(&edited.id, WAIT).await.unwrap();
    assert_eq!(
        edited.output,
        Some(json!(["hi", "book a taxi"])),
        "{}",
        edited.failure_reason
    );

    let used = admin
        .create("chat")
        .parent_execution_id(&turns[0].id)
        .session("u1")
        .send()
        .await
        .unwrap_err();
    assert_eq!(what(&used), (ErrorKind::Api, Some("conflict")), "{used}");
    assert!(
        used.to_string().contains("already has executions"),
        "{used}"
    );
    served.shutdown().await;
}

/// A serverless front door: invoked again for the same request, it creates nothing new.
async fn front_door(client: &Client, request_id: &str, order: Value) -> rebuno::Result<String> {
    let created = client
        .create("intake")
        .input(order)
        .idempotency_key(format!("intake:{request_id}"))
        .send()
        .await?;
    Ok(created.id)
}

#[tokio::test]
async fn the_same_request_id_creates_one_execution() {
    let kernel = kernel().await;
    let admin = client(&kernel, TOKEN);
    admin
        .register_agent("intake", "http://127.0.0.1:9/webhook", "s")
        .send()
        .await
        .unwrap();
    let first = front_door(&admin, "req-1", json!({"order": 42}))
        .await
        .unwrap();
    let retried = front_door(&admin, "req-1", json!({"order": 42}))
        .await
        .unwrap();
    let other = front_door(&admin, "req-2", json!({"order": 43}))
        .await
        .unwrap();
    assert_eq!(first, retried);
    assert_ne!(first, other);
    let page = admin.list().agent_id("intake").send().await.unwrap();
    assert_eq!(page.executions.len(), 2, "{page:?}");
}
