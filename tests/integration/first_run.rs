//! What a misconfigured agent says from its first run, over real HTTP with the dev kernel: a
//! wrong secret, a wrong agent id, a malformed signed webhook, an `https://` URL for a plain-HTTP
//! kernel and a collector that is down each log or fail with what to change.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use rebuno::wire::ExecutionStatus;
use std::time::Duration;

use rebuno::signing::sign_webhook;
use rebuno::{Agent, HandlerError};
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::{Value, json};

use crate::support::logs::Logs;
use crate::support::{SECRET, serve};

const PAYLOAD: &str = r#"{"execution_id":"0192f1a0-0000-7000-8000-000000000000","dispatch_id":"01920000-0000-7000-8000-000000000001","dispatch_attempt":1,"lease_timeout_seconds":120}"#;

fn echo(agent: rebuno::AgentBuilder) -> Agent {
    agent
        .handler(|input: Value| async move { Ok::<_, HandlerError>(input) })
        .build()
        .unwrap()
}

async fn post(url: &str, body: &str, signature: Option<String>) -> u16 {
    let mut request = reqwest::Client::new().post(url).body(body.to_owned());
    if let Some(signature) = signature {
        request = request.header("Rebuno-Signature", signature);
    }
    request.send().await.unwrap().status().as_u16()
}

/// Waits (up to 10 s) until a captured line contains every one of `needles`.
async fn logged(logs: &Logs, needles: &[&str]) -> String {
    for _ in 0..1000 {
        if let Some(line) = logs
            .text()
            .lines()
            .find(|line| needles.iter().all(|needle| line.contains(needle)))
        {
            return line.to_owned();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no line with {needles:?} in:\n{}", logs.text());
}

#[tokio::test(flavor = "current_thread")]
async fn a_wrong_secret_is_logged_once_with_what_to_check() {
    let (logs, _guard) = Logs::capture(tracing::Level::DEBUG);
    let kernel = DevKernel::start().await.unwrap();
    let agent = echo(
        Agent::builder("triage")
            .secret("a-stale-secret")
            .base_url(kernel.url()),
    );
    let served = serve(agent).await;
    kernel
        .register_agent(AgentSpec::new("triage", served.webhook_url(), SECRET))
        .unwrap();
    kernel
        .create_execution(NewExecution::new("triage", json!("hi")))
        .await
        .unwrap();

    let line = logged(&logs, &["WARN", "webhook refused (401)"]).await;
    assert!(
        line.contains("REBUNO_AGENT_SECRET") && line.contains("agent `triage`"),
        "{line}"
    );
    // Repeated refusals (the kernel's retries, or a scanner) stay at debug for a minute.
    let forged = sign_webhook(&rebuno::Secret::new("a-guess"), PAYLOAD.as_bytes());
    for _ in 0..3 {
        assert_eq!(
            post(&served.webhook_url(), PAYLOAD, Some(forged.clone())).await,
            401
        );
    }
    let text = logs.text();
    let warned = logs.lines_with("webhook refused (401)");
    let warned: Vec<_> = warned.iter().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warned.len(), 1, "one warn line, then quiet: {text}");
    assert!(
        logs.lines_with("webhook refused (401)").len() >= 4,
        "{text}"
    );
    for secret in [SECRET, "a-stale-secret", "a-guess"] {
        assert!(!text.contains(secret), "a secret reached the logs: {text}");
    }
    served.shutdown().await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_missing_signature_is_logged_as_not_from_the_kernel() {
    let (logs, _guard) = Logs::capture(tracing::Level::INFO);
    let kernel = DevKernel::start().await.unwrap();
    let served = serve(echo(crate::support::agent(&kernel, "open"))).await;
    assert_eq!(post(&served.webhook_url(), PAYLOAD, None).await, 401);
    let line = logged(&logs, &["WARN", "webhook refused (401)"]).await;
    assert!(line.contains("no Rebuno-Signature header"), "{line}");
    served.shutdown().await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_signed_webhook_that_is_not_a_dispatch_is_logged_with_what_was_wrong() {
    let (logs, _guard) = Logs::capture(tracing::Level::INFO);
    let kernel = DevKernel::start().await.unwrap();
    let served = serve(echo(crate::support::agent(&kernel, "picky"))).await;
    let body = r#"{"execution_id":"e","dispatch_id":"d","dispatch_attempt":1}"#;
    let signed = sign_webhook(&rebuno::Secret::new(SECRET), body.as_bytes());
    assert_eq!(post(&served.webhook_url(), body, Some(signed)).await, 400);
    let line = logged(&logs, &["WARN", "webhook refused (400)"]).await;
    assert!(
        line.contains("lease_timeout_seconds") && line.contains("agent_id=\"picky\""),
        "{line}"
    );
    served.shutdown().await;
}

#[tokio::test(flavor = "current_thread")]
async fn an_agent_id_the_kernel_does_not_know_is_logged_with_what_to_check() {
    let (logs, _guard) = Logs::capture(tracing::Level::INFO);
    let kernel = DevKernel::start().await.unwrap();
    // A typo: the kernel delivers "hello"'s dispatches here, signed with the right secret.
    let served = serve(echo(crate::support::agent(&kernel, "helo"))).await;
    kernel
        .register_agent(AgentSpec::new("hello", served.webhook_url(), SECRET))
        .unwrap();
    kernel
        .create_execution(NewExecution::new("hello", json!("hi")))
        .await
        .unwrap();
    let line = logged(&logs, &["ERROR", "could not fetch the execution"]).await;
    assert!(
        line.contains("(401)") && line.contains("agent id `helo` is registered"),
        "{line}"
    );
    served.shutdown().await;
}

/// The error and its causes, `outer: inner: ...`.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[tokio::test]
async fn an_https_url_for_a_plain_http_kernel_says_to_use_http() {
    let kernel = DevKernel::start().await.unwrap();
    let url = kernel.url().replacen("http://", "https://", 1);
    let client = rebuno::client::Client::builder()
        .base_url(url)
        .max_attempts(1)
        .build()
        .unwrap();
    let error = client
        .get("0192f1a0-0000-7000-8000-000000000000")
        .await
        .unwrap_err();
    let text = chain(&error);
    assert_eq!(error.kind(), rebuno::ErrorKind::Network, "{text}");
    assert!(
        text.contains("answered in plain HTTP") && text.contains("use http://"),
        "{text}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_failed_telemetry_export_names_its_cause() {
    use tracing_subscriber::layer::SubscriberExt as _;

    // A port nobody listens on: bound, then closed.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let telemetry = rebuno::telemetry::Telemetry::otlp(&endpoint)
        .metrics(false)
        .build()
        .unwrap();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(telemetry.layer()));
    let (kernel, served) = crate::support::kernel_with("exported", |agent| {
        agent.handler(|input: Value| async move {
            rebuno::step("noted", || async { Ok::<_, HandlerError>(1) }).await?;
            Ok::<_, HandlerError>(input)
        })
    })
    .await;
    let done = crate::support::run(&kernel, "exported", json!("hi")).await;
    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    served.shutdown().await;

    let error = telemetry.flush().await.unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains(&endpoint) && text.contains("failed: could not connect"),
        "{text}"
    );
    assert!(
        text.to_lowercase().contains("refused") && text.contains("is the collector running"),
        "{text}"
    );
}
