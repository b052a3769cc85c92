//! Durable LLM calls through `rebuno::llm::DurableLlm`: recorded once, replayed on re-delivery
//! without calling the provider again, refused with an HTTP answer when policy says no.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

mod support;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rebuno::HandlerError;
use rebuno::kernel::ReqwestTransport;
use rebuno::llm::DurableLlm;
use rebuno_devkernel::{AgentSpec, CreateExecution, DevKernel};
use serde_json::{Value, json};
use support::*;

/// A chat-completions stand-in on loopback that counts its calls.
async fn provider(calls: Arc<AtomicUsize>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://{}/v1/chat/completions",
        listener.local_addr().unwrap()
    );
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let calls = Arc::clone(&calls);
            let service = hyper::service::service_fn(
                move |_request: http::Request<hyper::body::Incoming>| {
                    let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                    let body = json!({ "id": format!("c{n}"), "choices": [{ "message": { "content": format!("answer {n}") } }], "usage": { "prompt_tokens": 12, "completion_tokens": 3 } });
                    async move {
                        let mut response = http::Response::new(http_body_util::Full::new(
                            Bytes::from(body.to_string()),
                        ));
                        response
                            .headers_mut()
                            .insert("content-type", "application/json".parse().unwrap());
                        Ok::<_, Infallible>(response)
                    }
                },
            );
            tokio::spawn(async move {
                auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await
            });
        }
    });
    url
}

/// Asks the model once; hangs afterwards while `hang` is set (the first dispatch "dies").
async fn ask(url: &str, hang: bool) -> Result<Value, HandlerError> {
    let llm = DurableLlm::new(ReqwestTransport::new()?);
    let body = json!({ "model": "gpt-test", "messages": [{ "role": "user", "content": "hi" }] });
    let request = http::Request::post(url)
        .header("content-type", "application/json")
        .body(Bytes::from(body.to_string()))?;
    let response = llm.send(request).await?;
    let status = response.status();
    let text = response.into_body().text().await?;
    if !status.is_success() {
        return Err(HandlerError::from(format!(
            "provider returned {status}: {text}"
        )));
    }
    if hang {
        std::future::pending::<()>().await;
    }
    Ok(serde_json::from_str::<Value>(&text)?["choices"][0]["message"]["content"].clone())
}

async fn start(
    kernel: &DevKernel,
    url: String,
    attempts: Arc<AtomicUsize>,
    policy: Option<&str>,
) -> Served {
    let agent = agent(kernel, "asker");
    agent.bind(move |_: Value| {
        let (url, attempts) = (url.clone(), Arc::clone(&attempts));
        async move { ask(&url, attempts.fetch_add(1, Ordering::SeqCst) == 0).await }
    });
    let served = serve(agent).await;
    let mut spec = AgentSpec::new("asker", served.webhook_url(), SECRET);
    if let Some(policy) = policy {
        spec = spec.policy_yaml(policy);
    }
    kernel.register_agent(spec).unwrap();
    served
}

#[tokio::test]
async fn a_recorded_llm_call_replays_without_calling_the_provider_again() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let url = provider(Arc::clone(&calls)).await;
    let served = start(&kernel, url, Arc::new(AtomicUsize::new(0)), None).await;
    let created = kernel
        .create_execution(CreateExecution::new("asker", json!({})))
        .await
        .unwrap();
    for _ in 0..400 {
        if kernel
            .events(created.id)
            .iter()
            .any(|e| e.kind == "step.succeeded")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    kernel.redeliver(created.id).unwrap();
    let done = kernel.wait_terminal(created.id, WAIT).await.unwrap();

    assert_eq!(
        done.output,
        Some(json!("answer 1")),
        "the replay served the recorded response"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the provider was called once"
    );
    let events = kernel.events(created.id);
    let succeeded = events.iter().find(|e| e.kind == "step.succeeded").unwrap();
    assert_eq!(
        (
            succeeded.payload["step_type"].clone(),
            succeeded.payload["target"].clone()
        ),
        (json!("llm_call"), json!("gpt-test"))
    );
    assert_eq!(
        succeeded.payload["usage"],
        json!({ "input_tokens": 12, "output_tokens": 3 })
    );
    let record = serde_json::to_value(&kernel.steps(created.id)[0]).unwrap()["result"].clone();
    assert_eq!(record["status"], 200);
    assert_eq!(record["headers"]["content-type"], "application/json");
    served.shutdown().await;
}

#[tokio::test]
async fn a_denied_llm_call_is_answered_as_a_refusal_and_fails_with_its_reason() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let url = provider(Arc::clone(&calls)).await;
    let policy = "default_action: allow\nrules:\n  - id: no-gpt\n    when: { step_kind: llm_call }\n    then: { decision: deny, reason: no_gpt }\n";
    let served = start(&kernel, url, Arc::new(AtomicUsize::new(1)), Some(policy)).await;

    let done = run(&kernel, "asker", json!({})).await;

    assert_eq!(done.status.as_str(), "failed");
    assert_eq!(
        done.failure_reason, "no_gpt",
        "the refusal inside the provider error was recovered"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "the provider was never called"
    );
    served.shutdown().await;
}
