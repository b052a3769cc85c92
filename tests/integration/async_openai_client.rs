//! async-openai clients made durable with `rebuno::async_openai`, against an OpenAI-style stub on
//! loopback: unary and streamed chat completions are recorded once and replayed on
//! re-delivery without reaching the provider, a denied call surfaces as async-openai's own API
//! error and fails the execution with the denial's reason, and provider retries stay inside
//! one step.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;
use rebuno::wire::ExecutionStatus;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::ReqwestService;
use async_openai::middleware::retry::OpenAIRetryLayer;
use async_openai::types::chat::{
    ChatCompletionRequestUserMessageArgs, CreateChatCompletionRequest,
    CreateChatCompletionRequestArgs,
};
use futures_util::StreamExt;
use rebuno::HandlerError;
use rebuno::wire::Execution;
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::{Value, json};
use support::llm_stub::{Fault, LlmStub};
use support::*;
use tower_layer::Layer;

type OpenAI = async_openai::Client<OpenAIConfig>;

fn config(stub: &LlmStub) -> OpenAIConfig {
    OpenAIConfig::new()
        .with_api_base(format!("{}/v1", stub.url()))
        .with_api_key("sk-test")
}

fn chat(content: &str) -> CreateChatCompletionRequest {
    CreateChatCompletionRequestArgs::default()
        .model("gpt-test")
        .messages([ChatCompletionRequestUserMessageArgs::default()
            .content(content)
            .build()
            .unwrap()
            .into()])
        .build()
        .unwrap()
}

/// Serves `agent_id` (its handler set by `configure`) and registers it with `policy`.
async fn start(
    kernel: &DevKernel,
    agent_id: &str,
    policy: Option<&str>,
    configure: impl FnOnce(rebuno::AgentBuilder) -> rebuno::AgentBuilder,
) -> Served {
    let agent = configure(agent(kernel, agent_id))
        .build()
        .expect("agent config");
    let served = serve(agent).await;
    let mut spec = AgentSpec::new(agent_id, served.webhook_url(), SECRET);
    if let Some(policy) = policy {
        spec = spec.policy_yaml(policy);
    }
    kernel.register_agent(spec).unwrap();
    served
}

/// Waits until the execution has a succeeded step, re-delivers it, and waits for its end.
async fn redeliver_after_first_step(kernel: &DevKernel, id: &str) -> Execution {
    for _ in 0..1000 {
        if kernel.events(id).iter().any(|e| e.kind == "step.succeeded") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    kernel.redeliver(id).unwrap();
    kernel.wait_terminal(id, WAIT).await.unwrap()
}

fn llm_steps(kernel: &DevKernel, id: &str) -> Vec<Value> {
    kernel
        .steps(id)
        .iter()
        .map(|s| serde_json::to_value(s).unwrap())
        .filter(|s| s["kind"] == "llm_call")
        .collect()
}

#[tokio::test]
async fn a_chat_completion_is_recorded_once_and_replayed_on_redelivery() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.unwrap();
    let stub = LlmStub::start().await;
    let openai = rebuno::async_openai::client(config(&stub));
    let attempts = Arc::new(AtomicUsize::new(0));
    let served = start(&kernel, "chatty", None, |agent| {
        let attempts = Arc::clone(&attempts);
        agent.handler_with_state(
            (openai, attempts),
            |(openai, attempts), _: Value| async move {
                let answer = openai.chat().create(chat("hi")).await?;
                if attempts.fetch_add(1, Ordering::SeqCst) == 0 {
                    std::future::pending::<()>().await; // the first dispatch "dies" here
                }
                Ok::<_, HandlerError>(json!({
                    "id": answer.id,
                    "text": answer.choices[0].message.content,
                }))
            },
        )
    })
    .await;
    let created = kernel
        .create_execution(NewExecution::new("chatty", json!({})))
        .await
        .unwrap();

    let done = redeliver_after_first_step(&kernel, &created.id).await;

    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    assert_eq!(
        done.output,
        Some(json!({ "id": "chatcmpl-stub-1", "text": stub.reply() })),
        "the replay served the recorded answer"
    );
    assert_eq!(stub.hits(), 1, "the provider was called once");
    assert_eq!(attempts.load(Ordering::SeqCst), 2, "two dispatches ran");
    let steps = llm_steps(&kernel, &created.id);
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0]["target"], "gpt-test");
    assert_eq!(
        steps[0]["args"],
        stub.requests()[0],
        "the step's args are the request body async-openai sent"
    );
    assert_eq!(steps[0]["result"]["status"], 200);
    assert_eq!(
        steps[0]["result"]["headers"]["content-type"],
        "application/json"
    );
    served.shutdown().await;
}

/// Reads an execution's live deltas from the kernel's SSE route into `into`.
async fn subscribe(kernel: &DevKernel, id: &str, into: Arc<Mutex<Vec<Value>>>) {
    let url = format!("{}/v0/executions/{id}/stream", kernel.url());
    let response = reqwest::get(url).await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    tokio::spawn(async move {
        let mut body = response.bytes_stream();
        let mut buffer = String::new();
        while let Some(Ok(chunk)) = body.next().await {
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buffer.find("\n\n") {
                let frame: String = buffer.drain(..end + 2).collect();
                if let Some(data) = frame.trim_end().strip_prefix("data: ") {
                    into.lock()
                        .unwrap()
                        .push(serde_json::from_str(data).unwrap());
                }
            }
        }
    });
}

#[tokio::test]
async fn a_streamed_chat_completion_is_teed_live_and_replayed_without_the_provider() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.unwrap();
    let stub = LlmStub::start().await;
    stub.set_reply("Streaming through Rebuno, one durable delta at a time: café ☕ and more.");
    stub.set_chunk_delay(Duration::from_millis(15));
    let openai = rebuno::async_openai::client(config(&stub));
    let attempts = Arc::new(AtomicUsize::new(0));
    let go = Arc::new(tokio::sync::Semaphore::new(0));
    let served = start(&kernel, "streamer", None, |agent| {
        let (attempts, go) = (Arc::clone(&attempts), Arc::clone(&go));
        agent.handler_with_state(
            (openai, attempts, go),
            |(openai, attempts, go), _: Value| async move {
                let first = attempts.fetch_add(1, Ordering::SeqCst) == 0;
                if first {
                    go.acquire().await?.forget(); // the test subscribes to deltas first
                }
                let (text, chunks) = stream_text(&openai).await?;
                // The next kernel call records the stream async-openai closed at `[DONE]`.
                let chunks: usize =
                    rebuno::step("count", || async move { Ok::<_, HandlerError>(chunks) }).await?;
                if first {
                    std::future::pending::<()>().await;
                }
                Ok::<_, HandlerError>(json!({ "text": text, "chunks": chunks }))
            },
        )
    })
    .await;
    let created = kernel
        .create_execution(NewExecution::new("streamer", json!({})))
        .await
        .unwrap();
    let deltas = Arc::new(Mutex::new(Vec::new()));
    subscribe(&kernel, &created.id, Arc::clone(&deltas)).await;
    go.add_permits(1);

    let done = redeliver_after_first_step(&kernel, &created.id).await;

    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    let output = done.output.unwrap();
    assert_eq!(
        output["text"],
        stub.reply(),
        "the replayed stream has the same text"
    );
    assert!(output["chunks"].as_u64().unwrap() > 1, "{output}");
    assert_eq!(stub.hits(), 1, "the replay did not reach the provider");
    let steps = llm_steps(&kernel, &created.id);
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0]["args"]["stream"], true);
    let record = &steps[0]["result"];
    assert_eq!(record["status"], 200);
    assert_eq!(record["headers"]["content-type"], "text/event-stream");
    let body = record["body"].as_str().unwrap();
    assert!(
        body.contains("☕") && body.ends_with("data: [DONE]\n\n"),
        "{body}"
    );
    let deltas = deltas.lock().unwrap().clone();
    assert!(deltas.len() > 1, "published while streaming: {deltas:?}");
    let seqs: Vec<i64> = deltas.iter().map(|d| d["seq"].as_i64().unwrap()).collect();
    assert_eq!(seqs, (0..deltas.len() as i64).collect::<Vec<_>>());
    let published: String = deltas.iter().map(|d| d["data"].as_str().unwrap()).collect();
    assert_eq!(published, body, "the deltas add up to the recorded stream");
    served.shutdown().await;
}

/// Reads a streamed completion: its text and how many content chunks it came in.
async fn stream_text(openai: &OpenAI) -> Result<(String, usize), OpenAIError> {
    let mut stream = openai.chat().create_stream(chat("stream please")).await?;
    let (mut text, mut chunks) = (String::new(), 0);
    while let Some(chunk) = stream.next().await {
        for choice in chunk?.choices {
            if let Some(content) = choice.delta.content.filter(|c| !c.is_empty()) {
                text.push_str(&content);
                chunks += 1;
            }
        }
    }
    Ok((text, chunks))
}

const DENY_LLM: &str = "default_action: allow\nrules:\n  - id: no-gpt\n    when: { step_kind: llm_call }\n    then: { decision: deny, reason: no_gpt }\n";

#[tokio::test]
async fn a_denied_call_is_an_openai_api_error_and_fails_the_execution_with_its_reason() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.unwrap();
    let stub = LlmStub::start().await;
    let openai = rebuno::async_openai::client(config(&stub));
    let seen = Arc::new(Mutex::new(None));
    let served = start(&kernel, "denied", Some(DENY_LLM), |agent| {
        let seen = Arc::clone(&seen);
        agent.handler_with_state((openai, seen), |(openai, seen), _: Value| async move {
            let error = match openai.chat().create(chat("hi")).await {
                Ok(answer) => return Ok::<_, HandlerError>(json!(answer.id)),
                Err(error) => error,
            };
            let refused = rebuno::llm::raise_for_refusal(&error).unwrap_err();
            let api = match &error {
                OpenAIError::ApiError(api) => Some((
                    api.status_code.as_u16(),
                    api.api_error.r#type.clone(),
                    api.api_error.message.clone(),
                )),
                _ => None,
            };
            *seen.lock().unwrap() = Some((
                api,
                error.to_string(),
                refused.kind(),
                refused.reason().map(str::to_owned),
            ));
            Err(error.into())
        })
    })
    .await;

    let done = run(&kernel, "denied", json!({})).await;

    assert_eq!(done.status, ExecutionStatus::Failed);
    assert_eq!(
        done.failure_reason, "no_gpt",
        "the refusal inside the OpenAIError was found"
    );
    assert_eq!(stub.hits(), 0, "the provider was never called");
    let (api, display, kind, reason) = seen.lock().unwrap().clone().unwrap();
    assert_eq!(
        api,
        Some((
            403,
            Some("rebuno_refusal".to_owned()),
            "rebuno_refusal: denied reason=no_gpt".to_owned()
        ))
    );
    assert_eq!(
        display,
        "403 Forbidden rebuno_refusal: rebuno_refusal: denied reason=no_gpt"
    );
    assert_eq!(
        (kind, reason.as_deref()),
        (rebuno::ErrorKind::Policy, Some("no_gpt"))
    );
    served.shutdown().await;
}

#[tokio::test]
async fn provider_retries_inside_the_layer_are_one_step_and_calls_outside_executions_pass_through()
{
    let _trace = trace_init();
    let kernel = DevKernel::start().await.unwrap();
    let stub = LlmStub::start().await;
    let service = rebuno::llm::DurableLlmLayer::new()
        .layer(OpenAIRetryLayer::new(2).layer(ReqwestService::new(reqwest::Client::new())));
    let openai = async_openai::Client::with_config(config(&stub)).with_http_service(service);

    let outside = openai.chat().create(chat("no execution")).await.unwrap();
    assert_eq!(outside.id, "chatcmpl-stub-1");
    assert_eq!(
        stub.hits(),
        1,
        "outside an execution the call went straight out"
    );

    stub.fault(Fault::Status(503));
    let served = start(&kernel, "retrier", None, |agent| {
        agent.handler_with_state(openai, |openai, _: Value| async move {
            let answer = openai.chat().create(chat("hi")).await?;
            Ok::<_, HandlerError>(json!(answer.id))
        })
    })
    .await;

    let done = run(&kernel, "retrier", json!({})).await;

    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    assert_eq!(done.output, Some(json!("chatcmpl-stub-3")));
    assert_eq!(stub.hits(), 3, "one failed attempt and its retry");
    let steps = llm_steps(&kernel, &done.id);
    assert_eq!(steps.len(), 1, "the retry stayed inside one step");
    assert_eq!(steps[0]["result"]["status"], 200);
    served.shutdown().await;
}

/// A policy that allows 10 tokens of LLM calls per execution: the stub's answer reports 16.
const BUDGET: &str = "default_action: allow\nrules:\n  - id: llm-budget\n    when: { step_kind: llm_call }\n    then: { decision: allow, budget: { max_tokens: 10 } }\n";

#[tokio::test]
async fn a_token_budget_stops_an_async_openai_stream_without_any_option() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.unwrap();
    let stub = LlmStub::start().await;
    let openai = rebuno::async_openai::client(config(&stub));
    let served = start(&kernel, "budgeted", Some(BUDGET), |agent| {
        agent.handler_with_state(openai, |openai, _: Value| async move {
            let mut answers = Vec::new();
            for _ in 0..2 {
                answers.push(match stream_text(&openai).await {
                    Ok((text, _)) => json!(text),
                    Err(error) => {
                        let refused = rebuno::llm::raise_for_refusal(&error).err();
                        json!(refused.map(|e| format!("{:?}", e.kind())))
                    }
                });
            }
            Ok::<_, HandlerError>(json!(answers))
        })
    })
    .await;

    let done = run(&kernel, "budgeted", json!({})).await;

    assert_eq!(
        done.output,
        Some(json!([stub.reply(), "Policy"])),
        "the budget denied the second stream: {done:?}"
    );
    let steps = llm_steps(&kernel, &done.id);
    let first = steps.iter().find(|s| s["status"] == "succeeded").unwrap();
    assert_eq!(first["usage_input"], 12, "{first:#}");
    assert!(
        first["args"].get("stream_options").is_none(),
        "args as async-openai built them"
    );
    let sent = stub.requests();
    assert_eq!(sent.len(), 1, "the denied stream never left: {sent:#?}");
    assert_eq!(sent[0]["stream_options"]["include_usage"], true);
    served.shutdown().await;
}
