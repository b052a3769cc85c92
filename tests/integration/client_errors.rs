//! A client's mistakes and the kernel's refusals, over real HTTP with the dev kernel: a refused
//! API key says which key to check (without showing it), an `https://` URL for a plain-HTTP
//! kernel fails at once with what to change, not after retrying for seconds, a `404` names what
//! it is about (and the retention that may have deleted it), a `403` the scope the key lacks.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use rebuno::ErrorKind;
use rebuno::client::Client;
use rebuno_devkernel::{AgentSpec, DevKernel};

const TOKEN: &str = "the-bootstrap-token";
const WRONG_KEY: &str = "rbk_not-a-key-of-this-kernel";

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

async fn kernel_with_token() -> DevKernel {
    DevKernel::builder()
        .bearer_token(Some(TOKEN.to_owned()))
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_refused_api_key_says_which_key_to_check_without_showing_it() {
    let kernel = kernel_with_token().await;
    let client = Client::builder()
        .base_url(kernel.url())
        .api_key(WRONG_KEY)
        .build()
        .unwrap();
    let error = client.agents().await.unwrap_err();
    let text = chain(&error);
    assert_eq!(error.kind(), ErrorKind::Unauthorized, "{text}");
    assert_eq!(error.status().map(|s| s.as_u16()), Some(401), "{text}");
    assert!(
        text.contains("ClientBuilder::api_key") && text.contains("the kernel's API keys"),
        "{text}"
    );
    assert!(!text.contains(WRONG_KEY), "the key is shown: {text}");
    assert!(!format!("{error:?}").contains(WRONG_KEY), "{error:?}");

    let right = Client::builder()
        .base_url(kernel.url())
        .api_key(TOKEN)
        .build()
        .unwrap();
    right.agents().await.unwrap();
}

#[tokio::test]
async fn a_missing_api_key_says_to_set_one() {
    let kernel = kernel_with_token().await;
    // An empty key is no key (and REBUNO_API_KEY is not read when the builder is given one).
    let client = Client::builder()
        .base_url(kernel.url())
        .api_key("")
        .build()
        .unwrap();
    let error = client.agents().await.unwrap_err();
    let text = chain(&error);
    assert_eq!(error.kind(), ErrorKind::Unauthorized, "{text}");
    assert!(
        text.contains("requires an API key") && text.contains("set REBUNO_API_KEY"),
        "{text}"
    );
}

#[tokio::test]
async fn an_https_url_for_a_plain_http_kernel_fails_at_once() {
    let kernel = DevKernel::start().await.unwrap();
    let url = kernel.url().replacen("http://", "https://", 1);
    // The default retries: six tries over about 8 s for an unreachable kernel.
    let client = Client::builder().base_url(url).build().unwrap();
    let started = Instant::now();
    let error = client
        .get("0192f1a0-0000-7000-8000-000000000000")
        .await
        .unwrap_err();
    let took = started.elapsed();
    let text = chain(&error);
    assert_eq!(error.kind(), ErrorKind::Network, "{text}");
    assert!(
        text.contains("answered in plain HTTP") && text.contains("use http://"),
        "{text}"
    );
    assert!(took < Duration::from_millis(900), "took {took:?}: {text}");
}

/// An ended execution the kernel's retention deleted: `previous()`, a fork and a read name the
/// execution and the retention, and say what to do.
#[tokio::test]
async fn a_404_after_retention_names_the_execution_and_the_retention() {
    let kernel = DevKernel::builder()
        .manual_clock()
        .execution_retention(Duration::from_secs(3600))
        // No agent answers: the execution is cancelled before it matters.
        .agent(AgentSpec::new("chat", "http://127.0.0.1:9/webhook", "s"))
        .start()
        .await
        .unwrap();
    let client = Client::builder().base_url(kernel.url()).build().unwrap();
    let turn = client.create("chat").send().await.unwrap();
    client.cancel(&turn.id).await.unwrap();
    assert_eq!(
        client.previous(&turn.id).await.unwrap(),
        serde_json::Value::Null
    );

    kernel.advance(Duration::from_secs(2 * 3600)).unwrap();
    assert!(kernel.execution(&turn.id).is_none(), "retention deleted it");

    let previous = client.previous(&turn.id).await.unwrap_err();
    let fork = client.fork(&turn.id, 1).send().await.unwrap_err();
    let read = client.get(&turn.id).await.unwrap_err();
    for (error, advice) in [
        (previous, "continue in a new session"),
        (fork, "raise its retention"),
        (read, "Check the id"),
    ] {
        let text = error.to_string();
        assert_eq!(error.code(), Some("not_found"), "{text}");
        assert_eq!(error.status().map(|s| s.as_u16()), Some(404), "{text}");
        assert!(
            text.starts_with(&format!("execution {} not found", turn.id)),
            "{text}"
        );
        assert!(
            text.contains("retention deleted it")
                && text.contains("REBUNO_RETENTION")
                && text.contains(advice),
            "{text}"
        );
    }
    kernel.shutdown().await;
}

/// A `404` names the agent the call was about.
#[tokio::test]
async fn a_404_names_the_unknown_agent() {
    let kernel = DevKernel::start().await.unwrap();
    let client = Client::builder().base_url(kernel.url()).build().unwrap();
    let error = client.create("nobody").send().await.unwrap_err();
    let text = error.to_string();
    assert_eq!(error.code(), Some("not_found"), "{text}");
    assert!(
        text.starts_with("agent \"nobody\" is not registered with this kernel")
            && text.contains("POST /v0/agents"),
        "{text}"
    );
    kernel.shutdown().await;
}

/// A key without the scope a call needs: the `403` names the scope, the key it is missing from
/// (never the key itself) and how to get one that has it.
#[tokio::test]
async fn a_403_names_the_missing_scope() {
    let kernel = kernel_with_token().await;
    let reader = kernel
        .create_api_key("reader", &["executions:read"])
        .unwrap();
    let client = Client::builder()
        .base_url(kernel.url())
        .api_key(reader.clone())
        .build()
        .unwrap();
    let error = client.create("chat").send().await.unwrap_err();
    let text = chain(&error);
    assert_eq!(error.status().map(|s| s.as_u16()), Some(403), "{text}");
    assert_eq!(error.code(), Some("forbidden"), "{text}");
    assert!(
        text.contains("lacks scope `executions:write`")
            && text.contains("`POST /v0/executions`")
            && text.contains(r#""scopes": ["executions:write"]"#)
            && text.contains("the key given to `ClientBuilder::api_key`"),
        "{text}"
    );
    assert!(!text.contains(&reader), "the key is shown: {text}");
    assert!(!format!("{error:?}").contains(&reader), "{error:?}");

    let writer = kernel
        .create_api_key("writer", &["executions:write"])
        .unwrap();
    let client = Client::builder()
        .base_url(kernel.url())
        .api_key(writer)
        .build()
        .unwrap();
    let error = client.list().send().await.unwrap_err();
    assert!(
        error.to_string().contains("lacks scope `executions:read`"),
        "{error}"
    );
    kernel.shutdown().await;
}
