//! `rebuno_hyper::LlmGateway`: a client that only lets you set its base URL (here a plain
//! reqwest client, standing in for genai, ollama-rs or openai-api-rs) makes durable LLM calls
//! through a loopback gateway bound to the handler's dispatch.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;

use std::sync::Arc;

use rebuno::HandlerError;
use rebuno::wire::ExecutionStatus;
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use rebuno_hyper::LlmGateway;
use serde_json::{Value, json};
use support::llm_stub::LlmStub;
use support::*;

/// What a base-URL-only client does: POST `{base}/chat/completions` with its own HTTP client.
async fn chat(base_url: &str, stream: bool) -> Result<String, HandlerError> {
    let body = json!({ "model": "gpt-test", "messages": [{ "role": "user", "content": "hi" }], "stream": stream });
    let response = reqwest::Client::new()
        .post(format!("{base_url}/chat/completions"))
        .json(&body)
        .send()
        .await?;
    Ok(response.error_for_status()?.text().await?)
}

#[tokio::test]
async fn a_base_url_client_through_the_gateway_records_once_and_replays() {
    let _trace = trace_init();
    let stub = LlmStub::start().await;
    let gateway = Arc::new(
        LlmGateway::start(format!("{}/v1", stub.url()))
            .await
            .unwrap(),
    );
    let kernel = DevKernel::start().await.unwrap();
    let agent = agent(&kernel, "gatewayed")
        .handler_with_state(Arc::clone(&gateway), |gateway, input: Value| async move {
            let base_url = gateway.base_url()?;
            let stream = input["stream"].as_bool().unwrap_or(false);
            let text = chat(&base_url, stream).await?;
            if rebuno::execution()?.dispatch_attempt() == 1 {
                std::future::pending::<()>().await;
            }
            Ok::<_, HandlerError>(json!({ "text": text, "base_url": base_url }))
        })
        .build()
        .expect("agent config");
    let served = serve(agent).await;
    kernel
        .register_agent(AgentSpec::new("gatewayed", served.webhook_url(), SECRET))
        .unwrap();

    for stream in [false, true] {
        let id = kernel
            .create_execution(NewExecution::new("gatewayed", json!({ "stream": stream })))
            .await
            .unwrap()
            .id;
        for _ in 0..1000 {
            if kernel
                .events(&id)
                .iter()
                .any(|e| e.kind == "step.succeeded")
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let hits = stub.hits();
        kernel.redeliver(&id).unwrap();
        let done = kernel.wait_terminal(&id, WAIT).await.unwrap();

        assert_eq!(done.status, ExecutionStatus::Completed, "stream={stream}");
        assert_eq!(
            stub.hits(),
            hits,
            "replayed without the provider, stream={stream}"
        );
        let steps = kernel.steps(&id);
        assert_eq!(steps.len(), 1);
        assert_eq!(
            (steps[0].kind.as_str(), steps[0].target.as_str()),
            ("llm_call", "gpt-test")
        );
        let record = steps[0].result.clone().unwrap();
        let output = done.output.unwrap();
        assert_eq!(output["text"], record["body"], "stream={stream}");
        let content_type = if stream {
            "text/event-stream"
        } else {
            "application/json"
        };
        assert_eq!(record["headers"]["content-type"], content_type);
        assert!(
            output["base_url"]
                .as_str()
                .unwrap()
                .starts_with("http://127.0.0.1:"),
            "a loopback URL: {output}"
        );
    }
    assert_eq!(stub.hits(), 2);

    let stray = reqwest::get(format!(
        "http://{}/x/forged/chat/completions",
        gateway.local_addr()
    ))
    .await
    .unwrap();
    assert_eq!(stray.status(), 404, "only issued tokens are forwarded");
    assert_eq!(stub.hits(), 2);
    served.shutdown().await;
}
