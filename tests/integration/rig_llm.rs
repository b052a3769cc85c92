//! rig providers made durable with `rebuno::llm::DurableLlm`: a completion (whole or streamed) is
//! one `llm_call` step, replayed on re-delivery without reaching the provider again, and a
//! policy refusal reaches rig as a provider error carrying `rebuno_refusal: …`.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;
use rebuno::wire::ExecutionStatus;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use rebuno::HandlerError;
use rebuno::llm::DurableLlm;
use rebuno::wire::Execution;
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use rig_core::completion::CompletionRequest;
use rig_core::message::AssistantContent;
use rig_core::providers::openai::wire::{Dialect, Quirks};
use rig_core::providers::openai::{OpenAI, OpenAIConfig};
use rig_core::streaming::{Item, StreamEvent};
use rig_reqwest::ReqwestClient;
use serde_json::{Value, json};
use support::llm_stub::{DEFAULT_REPLY, Fault, LlmStub};
use support::*;

const MODEL: &str = "gpt-test";
const DENY_LLM: &str = "default_action: allow\nrules:\n  - id: no-gpt\n    when: { step_kind: llm_call }\n    then: { decision: deny, reason: no_gpt }\n";

/// An OpenAI-compatible rig client on the stub, sending through `Durable`.
fn openai(base: &str) -> OpenAI {
    OpenAIConfig::new("sk-test")
        .with_base_url(format!("{base}/v1"))
        .connect(DurableLlm::new(ReqwestClient::default()))
}

/// One chat completion through rig's chat-completions wire, as text.
async fn complete(base: &str) -> Result<String, rig_core::ProviderError> {
    let response = openai(base)
        .chat(MODEL)
        .call(CompletionRequest::new("hi"))
        .await?;
    Ok(response
        .choice
        .iter()
        .filter_map(|content| match content {
            AssistantContent::Text(text) => Some(text.text().to_owned()),
            _ => None,
        })
        .collect())
}

/// A rig dialect that does not ask streams for their usage (as rig's Mistral and OpenRouter
/// dialects).
const UNASKING: Dialect = Dialect::gateway("unasking", "http://127.0.0.1:9/v1", "UNASKING_KEY")
    .with_quirks(Quirks::openai().without_stream_usage());

/// A rig client of the [`UNASKING`] dialect on the stub, through a `DurableLlm` with
/// `include_usage` as given (unset: the default).
fn unasking(base: &str, include_usage: Option<bool>) -> OpenAI {
    let mut http = DurableLlm::new(ReqwestClient::default());
    if let Some(include) = include_usage {
        http = http.include_usage(include);
    }
    OpenAIConfig::with_key(&UNASKING, "sk-test")
        .with_base_url(format!("{base}/v1"))
        .connect(http)
}

/// One streamed chat completion, read event by event as rig delivers it.
async fn stream(client: OpenAI) -> Result<String, rig_core::ProviderError> {
    let mut events = client.chat(MODEL).stream(CompletionRequest::new("hi"))?;
    let mut text = String::new();
    while let Some(item) = events.next().await {
        if let Item::Event(StreamEvent::Text { text: piece, .. }) = item? {
            text.push_str(&piece);
        }
    }
    Ok(text)
}

/// Serves `handler` as agent `rigger` (with `policy`, if any) and registers it.
async fn start<F, Fut>(kernel: &DevKernel, policy: Option<&str>, handler: F) -> Served
where
    F: Fn(Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, HandlerError>> + Send + 'static,
{
    let agent = agent(kernel, "rigger")
        .handler(handler)
        .build()
        .expect("agent config");
    let served = serve(agent).await;
    let mut spec = AgentSpec::new("rigger", served.webhook_url(), SECRET);
    if let Some(policy) = policy {
        spec = spec.policy_yaml(policy);
    }
    kernel.register_agent(spec).unwrap();
    served
}

/// Starts an execution, waits until its first attempt has recorded `steps` steps (that attempt
/// then hangs, as if its host died), re-delivers it and waits for the end.
async fn record_then_redeliver(kernel: &DevKernel, steps: usize) -> Execution {
    let created = kernel
        .create_execution(NewExecution::new("rigger", json!({})))
        .await
        .unwrap();
    let recorded = || {
        let events = kernel.events(&created.id);
        events.iter().filter(|e| e.kind == "step.succeeded").count() == steps
    };
    for _ in 0..1000 {
        if recorded() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(recorded(), "the first attempt recorded its steps");
    kernel.redeliver(&created.id).unwrap();
    match kernel.wait_terminal(&created.id, WAIT).await {
        Ok(done) => done,
        Err(error) => {
            let log: Vec<String> = kernel
                .events(&created.id)
                .iter()
                .map(|e| format!("{} {}", e.kind, e.payload))
                .collect();
            panic!("{error}:\n{}", log.join("\n"))
        }
    }
}

/// Each attempt's answer, shared with the test.
type Answers = Arc<Mutex<Vec<String>>>;

/// Records the attempt's answer; the first attempt then hangs forever.
async fn note_then_hang_once(answers: &Answers, answer: &str) {
    let first = {
        let mut answers = answers.lock().unwrap();
        answers.push(answer.to_owned());
        answers.len() == 1
    };
    if first {
        std::future::pending::<()>().await;
    }
}

/// The only step of the execution, as the kernel stored it.
fn only_step(kernel: &DevKernel, done: &Execution) -> Value {
    let steps = kernel.steps(&done.id);
    assert_eq!(steps.len(), 1, "one step: {steps:?}");
    serde_json::to_value(&steps[0]).unwrap()
}

#[tokio::test]
async fn a_rig_completion_is_recorded_once_and_replayed_on_redelivery() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.unwrap();
    let stub = LlmStub::start().await;
    let answers = Answers::default();
    let served = {
        let (base, answers) = (stub.url(), Arc::clone(&answers));
        start(&kernel, None, move |_: Value| {
            let (base, answers) = (base.clone(), Arc::clone(&answers));
            async move {
                let text = complete(&base).await?;
                note_then_hang_once(&answers, &text).await;
                Ok::<_, HandlerError>(json!(text))
            }
        })
        .await
    };

    let done = record_then_redeliver(&kernel, 1).await;

    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    assert_eq!(done.output, Some(json!(DEFAULT_REPLY)));
    assert_eq!(
        *answers.lock().unwrap(),
        [DEFAULT_REPLY, DEFAULT_REPLY],
        "the replay answered what the provider said"
    );
    assert_eq!(stub.hits(), 1, "the provider was called once");
    assert_eq!(stub.requests()[0]["model"], MODEL);
    let succeeded: Vec<_> = kernel
        .events(&done.id)
        .into_iter()
        .filter(|e| e.kind == "step.succeeded")
        .collect();
    assert_eq!(succeeded.len(), 1);
    assert_eq!(succeeded[0].payload["step_type"], "llm_call");
    assert_eq!(succeeded[0].payload["target"], MODEL);
    let record = &only_step(&kernel, &done)["result"];
    assert_eq!(record["status"], 200);
    assert_eq!(record["headers"]["content-type"], "application/json");
    let body: Value = serde_json::from_str(record["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], DEFAULT_REPLY);
    served.shutdown().await;
}

#[tokio::test]
async fn a_rig_stream_is_recorded_when_rig_drops_it_and_replays_without_the_provider() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.unwrap();
    let stub = LlmStub::start().await;
    let answers = Answers::default();
    let served = {
        let (base, answers) = (stub.url(), Arc::clone(&answers));
        start(&kernel, None, move |_: Value| {
            let (base, answers) = (base.clone(), Arc::clone(&answers));
            async move {
                let text = stream(openai(&base)).await?;
                // rig stops at `[DONE]` and drops the body: the record is handed to the
                // execution, which writes it before its next step.
                rebuno::step("after", || async { Ok::<_, HandlerError>(1) }).await?;
                note_then_hang_once(&answers, &text).await;
                Ok::<_, HandlerError>(json!(text))
            }
        })
        .await
    };

    let done = record_then_redeliver(&kernel, 2).await;

    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    assert_eq!(done.output, Some(json!(DEFAULT_REPLY)));
    assert_eq!(*answers.lock().unwrap(), [DEFAULT_REPLY, DEFAULT_REPLY]);
    assert_eq!(
        stub.hits(),
        1,
        "the replayed stream never reached the provider"
    );
    assert_eq!(stub.requests()[0]["stream"], true);
    let steps = serde_json::to_value(kernel.steps(&done.id)).unwrap();
    let steps = steps.as_array().unwrap();
    assert_eq!(steps.len(), 2, "the llm_call and the local step: {steps:?}");
    let step = steps.iter().find(|s| s["kind"] == "llm_call").unwrap();
    assert_eq!(step["target"], MODEL);
    let record = &step["result"];
    assert_eq!(record["status"], 200);
    assert_eq!(record["headers"]["content-type"], "text/event-stream");
    let body = record["body"].as_str().unwrap();
    assert!(body.starts_with("data: {"), "the SSE text: {body}");
    assert!(
        body.trim_end().ends_with("data: [DONE]"),
        "up to [DONE]: {body}"
    );
    let events = kernel.events(&done.id);
    let succeeded = events.iter().find(|e| e.kind == "step.succeeded").unwrap();
    assert_eq!(
        (
            &succeeded.payload["step_type"],
            &succeeded.payload["target"]
        ),
        (&json!("llm_call"), &json!(MODEL))
    );
    served.shutdown().await;
}

#[tokio::test]
async fn a_recorded_provider_error_replays_as_the_same_rig_error() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.unwrap();
    let stub = LlmStub::start().await;
    stub.fault(Fault::Status(429));
    let answers = Answers::default();
    let served = {
        let (base, answers) = (stub.url(), Arc::clone(&answers));
        start(&kernel, None, move |_: Value| {
            let (base, answers) = (base.clone(), Arc::clone(&answers));
            async move {
                let error = complete(&base).await.expect_err("the provider said 429");
                note_then_hang_once(&answers, &error.to_string()).await;
                Ok::<_, HandlerError>(json!(error.to_string()))
            }
        })
        .await
    };

    let done = record_then_redeliver(&kernel, 1).await;

    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    let answers = answers.lock().unwrap().clone();
    assert_eq!(answers.len(), 2);
    assert_eq!(answers[0], answers[1], "the same error, live and replayed");
    assert!(answers[0].contains("429"), "{}", answers[0]);
    assert!(
        answers[0].contains("stub fault: status 429"),
        "{}",
        answers[0]
    );
    assert_eq!(stub.hits(), 1);
    let record = &only_step(&kernel, &done)["result"];
    assert_eq!(record["status"], 429);
    served.shutdown().await;
}

#[tokio::test]
async fn a_denied_rig_call_is_a_provider_error_naming_the_refusal() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.unwrap();
    let stub = LlmStub::start().await;
    let seen = Arc::new(Mutex::new(Vec::<(String, Option<String>)>::new()));
    let served = {
        let (base, seen) = (stub.url(), Arc::clone(&seen));
        start(&kernel, Some(DENY_LLM), move |_: Value| {
            let (base, seen) = (base.clone(), Arc::clone(&seen));
            async move {
                let streamed = stream(openai(&base)).await.expect_err("refused");
                let error = complete(&base).await.expect_err("refused");
                for error in [&streamed, &error] {
                    let raised = rebuno::llm::raise_for_refusal(error).err();
                    let reason = raised.and_then(|e| e.reason().map(str::to_owned));
                    seen.lock().unwrap().push((error.to_string(), reason));
                }
                Err::<Value, _>(HandlerError::from(error))
            }
        })
        .await
    };

    let done = run(&kernel, "rigger", json!({})).await;

    assert_eq!(done.status, ExecutionStatus::Failed);
    assert_eq!(done.failure_reason, "no_gpt");
    assert_eq!(stub.hits(), 0, "the provider was never called");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "the stream and the call were both refused");
    for (message, reason) in seen {
        assert!(
            message.contains("rebuno_refusal: denied reason=no_gpt"),
            "{message}"
        );
        assert_eq!(reason.as_deref(), Some("no_gpt"));
    }
    served.shutdown().await;
}

/// A policy that allows 10 tokens of LLM calls per execution: the stub's answer reports 16.
const BUDGET: &str = "default_action: allow\nrules:\n  - id: llm-budget\n    when: { step_kind: llm_call }\n    then: { decision: allow, budget: { max_tokens: 10 } }\n";

#[tokio::test]
async fn a_token_budget_stops_a_rig_stream_whose_dialect_does_not_ask_for_usage() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.unwrap();
    let stub = LlmStub::start().await;
    let served = {
        let base = stub.url();
        start(&kernel, Some(BUDGET), move |input: Value| {
            let base = base.clone();
            async move {
                let mut answers = Vec::new();
                for _ in 0..2 {
                    let client = unasking(&base, input["include_usage"].as_bool());
                    answers.push(match stream(client).await {
                        Ok(text) => json!(text),
                        Err(error) => {
                            let refused = rebuno::llm::raise_for_refusal(&error).err();
                            json!(refused.map(|e| format!("{:?}", e.kind())))
                        }
                    });
                }
                Ok::<_, HandlerError>(json!(answers))
            }
        })
        .await
    };

    let done = run(&kernel, "rigger", json!({})).await;
    assert_eq!(
        done.output,
        Some(json!([DEFAULT_REPLY, "Policy"])),
        "the budget denied the second stream: {done:?}"
    );
    let first = kernel
        .steps(&done.id)
        .into_iter()
        .find(|s| s.status == "succeeded")
        .map(|s| serde_json::to_value(s).unwrap())
        .expect("the first stream was recorded");
    assert_eq!(first["usage_input"], 12, "{first:#}");
    assert!(
        first["args"].get("stream_options").is_none(),
        "args as rig built them"
    );

    let off = run(&kernel, "rigger", json!({ "include_usage": false })).await;
    assert_eq!(
        off.output,
        Some(json!([DEFAULT_REPLY, DEFAULT_REPLY])),
        "turned off, the streams report no usage: {off:?}"
    );
    let sent = stub.requests();
    assert_eq!(sent.len(), 3, "the denied stream never left: {sent:#?}");
    assert_eq!(sent[0]["stream_options"]["include_usage"], true);
    assert!(sent[1..].iter().all(|r| r.get("stream_options").is_none()));
    served.shutdown().await;
}
