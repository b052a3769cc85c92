//! Durable LLM calls over real HTTP: an agent served by rebuno-hyper calls an OpenAI-style stub
//! through `rebuno::llm::fetch`, against the in-process dev kernel. Each test checks the event
//! log, the recorded step and the stub's hit counter: recorded once, replayed on re-delivery
//! without a new provider hit, streamed live with consecutive `seq`, refused as an HTTP answer,
//! and failed when the provider breaks mid-stream.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use rebuno::HandlerError;
use rebuno::wire::ExecutionStatus;
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::{Value, json};
use support::llm_stub::{Fault, LlmStub};
use support::*;
use tokio::sync::Semaphore;

/// How the handler treats the answer.
#[derive(Clone, Copy)]
enum Read {
    /// Read the whole body and return it with the status.
    All,
    /// Stop reading (and drop the body) once `data: [DONE]` arrived.
    UntilDone,
    /// Read one chunk, then drop the body.
    FirstChunk,
}

/// One call to the model, as the handler makes it.
async fn ask(input: &Value) -> Result<Value, HandlerError> {
    let stream = input["stream"].as_bool().unwrap_or(false);
    let body = if input["raw"].as_bool() == Some(true) {
        Bytes::from_static(b"not json: an upload")
    } else {
        let prompt = json!({ "model": "gpt-test", "messages": [{ "role": "user", "content": "hi" }], "stream": stream });
        Bytes::from(prompt.to_string())
    };
    let request = http::Request::post(input["url"].as_str().unwrap_or_default())
        .header("content-type", "application/json")
        .body(body)?;
    let response = if input["canned"].as_bool() == Some(true) {
        let service = tower_layer::Layer::layer(&rebuno::llm::DurableLlmLayer::new(), Canned);
        service.send(request).await?
    } else {
        rebuno::llm::fetch(request).await?
    };
    let status = response.status().as_u16();
    let read = match input["read"].as_str() {
        Some("until_done") => Read::UntilDone,
        Some("first_chunk") => Read::FirstChunk,
        _ => Read::All,
    };
    let text = read_body(response.into_body(), read).await?;
    Ok(json!({ "status": status, "text": text }))
}

async fn read_body(mut body: rebuno::llm::LlmBody, read: Read) -> Result<String, HandlerError> {
    let mut text = Vec::new();
    while let Some(chunk) = body.next().await {
        text.extend_from_slice(&chunk.map_err(HandlerError::from)?);
        match read {
            Read::FirstChunk => break,
            Read::UntilDone if text.ends_with(b"data: [DONE]\n\n") => break,
            _ => {}
        }
    }
    drop(body);
    Ok(String::from_utf8(text)?)
}

/// The test's agent: waits for `gate` (when given a permit count of 0), asks once, and on the
/// first delivery hangs after asking when `hang_first` is set (a dispatch that "dies").
struct Asker {
    kernel: DevKernel,
    served: Served,
    gate: Arc<Semaphore>,
}

async fn asker(policy: Option<&str>, gated: bool) -> Asker {
    let kernel = DevKernel::start().await.unwrap();
    let gate = Arc::new(Semaphore::new(if gated { 0 } else { 1000 }));
    let agent = agent(&kernel, "asker")
        .handler_with_state(Arc::clone(&gate), |gate, input: Value| async move {
            let context = rebuno::execution()?;
            if context.dispatch_attempt() == 1 {
                gate.acquire().await?.forget();
            }
            let answer = ask(&input).await;
            if input["swallow"].as_bool() == Some(true) {
                if input["hang_first"].as_bool() == Some(true) && context.dispatch_attempt() == 1 {
                    std::future::pending::<()>().await;
                }
                let status = answer.as_ref().ok().map(|a| a["status"].clone());
                return Ok(json!({ "swallowed": format!("{answer:?}"), "status": status }));
            }
            let answer = answer?;
            if input["then_step"].as_bool() == Some(true) {
                rebuno::step("after", || async { Ok::<_, std::convert::Infallible>(1) }).await?;
            }
            if input["hang_first"].as_bool() == Some(true) && context.dispatch_attempt() == 1 {
                std::future::pending::<()>().await;
            }
            Ok::<_, HandlerError>(answer)
        })
        .build()
        .expect("agent config");
    let served = serve(agent).await;
    let mut spec = AgentSpec::new("asker", served.webhook_url(), SECRET);
    if let Some(policy) = policy {
        spec = spec.policy_yaml(policy);
    }
    kernel.register_agent(spec).unwrap();
    Asker {
        kernel,
        served,
        gate,
    }
}

impl Asker {
    async fn create(&self, input: Value) -> String {
        self.kernel
            .create_execution(NewExecution::new("asker", input))
            .await
            .unwrap()
            .id
    }

    async fn wait_event(&self, id: &str, kind: &str) {
        for _ in 0..2000 {
            if self.kernel.events(id).iter().any(|e| e.kind == kind) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "no {kind} event for {id}: {:?}",
            types(&self.kernel.events(id))
        );
    }

    /// The one `llm_call` step's stored form.
    fn llm_step(&self, id: &str) -> Value {
        let steps: Vec<Value> = self
            .kernel
            .steps(id)
            .iter()
            .map(|s| serde_json::to_value(s).unwrap())
            .filter(|s| s["kind"] == "llm_call")
            .collect();
        assert_eq!(steps.len(), 1, "one llm_call step: {steps:#?}");
        steps[0].clone()
    }

    /// Re-delivers the execution whose first dispatch hangs, and waits for its end.
    async fn redeliver_and_finish(&self, id: &str) -> rebuno::wire::Execution {
        self.kernel.redeliver(id).unwrap();
        self.kernel.wait_terminal(id, WAIT).await.unwrap()
    }

    fn client(&self) -> rebuno::client::Client {
        rebuno::client::Client::builder()
            .base_url(self.kernel.url())
            .build()
            .unwrap()
    }
}

#[tokio::test]
async fn a_recorded_call_replays_on_redelivery_without_a_new_provider_hit() {
    let _trace = trace_init();
    let stub = LlmStub::start().await;
    let asker = asker(None, false).await;
    let id = asker
        .create(json!({ "url": stub.chat_url(), "hang_first": true }))
        .await;
    asker.wait_event(&id, "step.succeeded").await;
    let live_hits = stub.hits();

    let done = asker.redeliver_and_finish(&id).await;

    assert_eq!(done.status, ExecutionStatus::Completed);
    assert_eq!(
        (live_hits, stub.hits()),
        (1, 1),
        "the provider was hit once"
    );
    let step = asker.llm_step(&id);
    let record = &step["result"];
    assert_eq!(record["status"], 200);
    assert_eq!(
        record["headers"],
        json!({ "content-type": "application/json" })
    );
    let output = done.output.unwrap();
    assert_eq!(
        output["text"], record["body"],
        "the replay served the record"
    );
    let body: Value = serde_json::from_str(output["text"].as_str().unwrap()).unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], stub.reply());
    let events = asker.kernel.events(&id);
    let succeeded = events.iter().find(|e| e.kind == "step.succeeded").unwrap();
    assert_eq!(succeeded.payload["step_type"], "llm_call");
    assert_eq!(succeeded.payload["target"], "gpt-test");
    assert_eq!(stub.requests()[0]["model"], "gpt-test");
    asker.served.shutdown().await;
}

#[tokio::test]
async fn a_streamed_call_is_teed_live_recorded_whole_and_replayed_as_a_stream() {
    let _trace = trace_init();
    let stub = LlmStub::start().await;
    // ~4500 characters with multi-byte ones cut across network chunks: both flush rules
    // (2000 characters, 50 ms) and the 1750-character pieces come into play.
    stub.set_reply("héllo wörld ☕ ".repeat(300));
    stub.split_utf8(true);
    stub.set_chunk_chars(2200);
    stub.set_chunk_delay(Duration::from_millis(150));
    let asker = asker(None, true).await;
    let id = asker
        .create(json!({ "url": stub.chat_url(), "stream": true, "hang_first": true }))
        .await;
    let mut deltas = asker.client().stream(&id).await.unwrap();
    asker.gate.add_permits(1);
    let first = tokio::time::timeout(WAIT, deltas.next())
        .await
        .expect("a first delta")
        .unwrap()
        .unwrap();
    let so_far = types(&asker.kernel.events(&id));
    assert!(
        !so_far.contains(&"step.succeeded".to_owned()),
        "a delta arrived while the provider was still streaming: {so_far:?}"
    );
    asker.wait_event(&id, "step.succeeded").await;
    let record = asker.llm_step(&id)["result"].clone();
    let body = record["body"].as_str().unwrap().to_owned();

    let mut text = first.data.clone();
    let mut live = vec![first];
    while text.len() < body.len() {
        let delta = tokio::time::timeout(WAIT, deltas.next())
            .await
            .expect("deltas keep coming")
            .unwrap()
            .unwrap();
        text.push_str(&delta.data);
        live.push(delta);
    }
    let done = asker.redeliver_and_finish(&id).await;

    assert_eq!(text, body, "the deltas add up to the recorded body");
    assert!(!body.contains('\u{fffd}'), "no character was split");
    assert!(body.ends_with("data: [DONE]\n\n"));
    assert_eq!(record["headers"]["content-type"], "text/event-stream");
    let seqs: Vec<i64> = live.iter().map(|d| d.seq).collect();
    assert_eq!(
        seqs,
        (0..live.len() as i64).collect::<Vec<_>>(),
        "consecutive seq"
    );
    assert!(live.len() >= 3, "several flushes: {seqs:?}");
    let sizes: Vec<usize> = live.iter().map(|d| d.data.chars().count()).collect();
    assert!(sizes.iter().all(|n| *n <= 1750), "{sizes:?}");
    assert!(
        sizes.contains(&1750),
        "a long chunk was cut into pieces: {sizes:?}"
    );
    let step_id = asker.llm_step(&id)["step_id"].clone();
    assert!(live.iter().all(|d| json!(d.step_id) == step_id));
    assert_eq!(done.status, ExecutionStatus::Completed);
    assert_eq!(done.output.unwrap()["text"], body, "replayed byte for byte");
    assert_eq!(stub.hits(), 1, "the replay did not call the provider");
    asker.served.shutdown().await;
}

#[tokio::test]
async fn a_consumer_that_stops_at_done_still_records_the_answer_once() {
    let _trace = trace_init();
    let stub = LlmStub::start().await;
    let asker = asker(None, false).await;

    let id = asker
        .create(json!({ "url": stub.chat_url(), "stream": true, "read": "until_done" }))
        .await;
    let done = asker.kernel.wait_terminal(&id, WAIT).await.unwrap();

    assert_eq!(done.status, ExecutionStatus::Completed);
    let record = asker.llm_step(&id)["result"].clone();
    assert_eq!(record["body"], done.output.unwrap()["text"]);
    let events = types(&asker.kernel.events(&id));
    assert_eq!(
        events.iter().filter(|e| *e == "step.succeeded").count(),
        1,
        "recorded once: {events:?}"
    );
    asker.served.shutdown().await;
}

#[tokio::test]
async fn a_body_dropped_early_records_what_arrived_before_the_next_step() {
    let _trace = trace_init();
    let stub = LlmStub::start().await;
    let asker = asker(None, false).await;

    let id = asker
        .create(json!({ "url": stub.chat_url(), "stream": true, "read": "first_chunk", "then_step": true }))
        .await;
    let done = asker.kernel.wait_terminal(&id, WAIT).await.unwrap();

    assert_eq!(done.status, ExecutionStatus::Completed);
    let record = asker.llm_step(&id)["result"].clone();
    let first = done.output.unwrap()["text"].as_str().unwrap().to_owned();
    assert!(first.starts_with("data: "), "{first:?}");
    assert_eq!(
        record["body"], first,
        "a truncated answer is recorded as a success"
    );
    let events = asker.kernel.events(&id);
    let seq_of = |kind: &str, target: &str| {
        events
            .iter()
            .find(|e| e.kind == kind && e.payload["target"] == target)
            .map(|e| e.event_seq)
            .unwrap_or_else(|| panic!("no {kind} for {target}: {:?}", types(&events)))
    };
    assert!(
        seq_of("step.succeeded", "gpt-test") < seq_of("step.proposed", "after"),
        "the dropped call was recorded before the next step began"
    );
    asker.served.shutdown().await;
}

#[tokio::test]
async fn a_provider_that_breaks_mid_stream_fails_the_step() {
    let _trace = trace_init();
    let stub = LlmStub::start().await;
    stub.fault(Fault::CloseMidStream { after_chunks: 2 });
    let asker = asker(None, false).await;

    let id = asker
        .create(json!({ "url": stub.chat_url(), "stream": true }))
        .await;
    let done = asker.kernel.wait_terminal(&id, WAIT).await.unwrap();

    assert_eq!(done.status, ExecutionStatus::Failed);
    let step = asker.llm_step(&id);
    assert_eq!(step["status"], "failed", "{step:#}");
    assert!(step["error"]["message"].is_string(), "{step:#}");
    let events = types(&asker.kernel.events(&id));
    assert!(events.contains(&"step.failed".to_owned()), "{events:?}");
    asker.served.shutdown().await;
}

#[tokio::test]
async fn a_call_that_failed_mid_stream_fails_again_on_replay_without_a_new_provider_hit() {
    let _trace = trace_init();
    let stub = LlmStub::start().await;
    stub.fault(Fault::CloseMidStream { after_chunks: 2 });
    let asker = asker(None, false).await;
    let input =
        json!({ "url": stub.chat_url(), "stream": true, "swallow": true, "hang_first": true });
    let id = asker.create(input).await;
    asker.wait_event(&id, "step.failed").await;

    let done = asker.redeliver_and_finish(&id).await;

    assert_eq!(done.status, ExecutionStatus::Completed);
    let swallowed = done.output.unwrap()["swallowed"]
        .as_str()
        .unwrap()
        .to_owned();
    let recorded = asker.llm_step(&id)["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(swallowed.starts_with("Err("), "{swallowed}");
    assert!(
        swallowed.contains(&recorded.replace('"', "\\\"")),
        "the replay failed with the recorded message {recorded:?}: {swallowed}"
    );
    assert_eq!(stub.hits(), 1, "the failed call was not sent again");
}

#[tokio::test]
async fn an_error_status_is_recorded_and_replayed_like_any_answer() {
    let _trace = trace_init();
    let stub = LlmStub::start().await;
    // A status the default retry policy does not retry (it retries 408, 429 and 5xx).
    stub.fault(Fault::Status(400));
    let asker = asker(None, false).await;
    let id = asker
        .create(json!({ "url": stub.chat_url(), "hang_first": true }))
        .await;
    asker.wait_event(&id, "step.succeeded").await;

    let done = asker.redeliver_and_finish(&id).await;

    let output = done.output.unwrap();
    assert_eq!(output["status"], 400);
    assert_eq!(asker.llm_step(&id)["result"]["status"], 400);
    assert_eq!(
        stub.hits(),
        1,
        "the failed answer was replayed, not re-sent"
    );
    asker.served.shutdown().await;
}

#[tokio::test]
async fn a_denied_raw_call_is_an_error_and_fails_the_execution_policy_denied() {
    let _trace = trace_init();
    let stub = LlmStub::start().await;
    let policy = "default_action: allow\nrules:\n  - id: no-gpt\n    when: { step_kind: llm_call }\n    then: { decision: deny, reason: no GPT here }\n";
    let asker = asker(Some(policy), false).await;

    // `llm::fetch(..).await?`: the refusal is an Err, never an answer to parse; the handler
    // goes no further (no step after it) and the execution fails with the denial.
    let id = asker
        .create(json!({ "url": stub.chat_url(), "then_step": true }))
        .await;
    let done = asker.kernel.wait_terminal(&id, WAIT).await.unwrap();
    assert_eq!(done.status, ExecutionStatus::Failed);
    assert_eq!(done.failure_reason, "policy_denied: no GPT here");
    let kinds = types(&asker.kernel.events(&id));
    assert!(kinds.contains(&"step.denied".to_owned()), "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|k| *k == "step.proposed").count(),
        1,
        "nothing ran after the refused call: {kinds:?}"
    );
    assert_eq!(stub.hits(), 0, "the provider was never called");

    // The same through `DurableLlm::send` on a service of the user's own.
    let id = asker
        .create(json!({ "url": stub.chat_url(), "canned": true }))
        .await;
    let done = asker.kernel.wait_terminal(&id, WAIT).await.unwrap();
    assert_eq!(done.failure_reason, "policy_denied: no GPT here");
    asker.served.shutdown().await;
}

#[tokio::test]
async fn an_approval_gated_call_swallowed_by_the_handler_still_blocks_then_runs_once() {
    let _trace = trace_init();
    let stub = LlmStub::start().await;
    let policy = "default_action: allow\nrules:\n  - id: ask-first\n    when: { step_kind: llm_call }\n    then: { decision: require_approval }\n";
    let asker = asker(Some(policy), false).await;

    let id = asker
        .create(json!({ "url": stub.chat_url(), "swallow": true }))
        .await;
    asker
        .kernel
        .wait_until(&id, WAIT, |s| s == ExecutionStatus::Blocked)
        .await
        .expect("the swallowed refusal still blocked the execution");
    assert_eq!(stub.hits(), 0);
    let approval = asker.kernel.approvals().pop().unwrap();
    asker.kernel.grant(&approval.id).unwrap();
    let done = asker.kernel.wait_terminal(&id, WAIT).await.unwrap();

    assert_eq!(done.status, ExecutionStatus::Completed);
    assert_eq!(
        done.output.unwrap()["status"],
        200,
        "after the grant the call went through"
    );
    assert_eq!(
        stub.hits(),
        1,
        "the provider was called once, after the grant"
    );
    asker.served.shutdown().await;
}

#[tokio::test]
async fn requests_outside_an_execution_or_without_a_json_body_pass_through() {
    let _trace = trace_init();
    let stub = LlmStub::start().await;
    let request = http::Request::post(stub.chat_url())
        .header("content-type", "application/json")
        .body(Bytes::from(r#"{"model":"gpt-test","messages":[]}"#))
        .unwrap();
    let outside = rebuno::llm::fetch(request).await.unwrap();
    assert_eq!(outside.status(), 200);
    assert_eq!(stub.hits(), 1);

    let asker = asker(None, false).await;
    let id = asker
        .create(json!({ "url": stub.chat_url(), "raw": true }))
        .await;
    let done = asker.kernel.wait_terminal(&id, WAIT).await.unwrap();

    assert_eq!(done.status, ExecutionStatus::Completed);
    assert_eq!(stub.hits(), 2, "the non-JSON request reached the provider");
    assert!(asker.kernel.steps(&id).is_empty(), "and was not recorded");
    asker.served.shutdown().await;
}

#[tokio::test]
async fn any_tower_service_wrapped_by_the_layer_is_recorded_and_replayed() {
    let _trace = trace_init();
    let asker = asker(None, false).await;
    let id = asker
        .create(json!({ "url": "http://provider.invalid/v1/chat/completions", "canned": true, "hang_first": true }))
        .await;
    asker.wait_event(&id, "step.succeeded").await;

    let done = asker.redeliver_and_finish(&id).await;

    assert_eq!(done.status, ExecutionStatus::Completed);
    let record = asker.llm_step(&id)["result"].clone();
    assert_eq!(
        record["body"],
        r#"{"choices":[{"message":{"content":"canned"}}]}"#
    );
    assert_eq!(done.output.unwrap()["text"], record["body"]);
    let events = types(&asker.kernel.events(&id));
    let runs = events.iter().filter(|e| *e == "step.executing").count();
    assert_eq!(runs, 1, "the second delivery replayed: {events:?}");
    asker.served.shutdown().await;
}

/// The agent's kernel transport, with every live-delta publish failing.
#[derive(Debug)]
struct NoDeltas(rebuno::transport::ReqwestTransport);

impl rebuno::transport::Transport for NoDeltas {
    fn send(
        &self,
        request: http::Request<Bytes>,
        timeout: Duration,
    ) -> rebuno::transport::TransportFuture {
        if request.uri().path().ends_with("/stream") {
            let refused = rebuno::transport::TransportError::new(
                rebuno::transport::TransportErrorKind::Other,
                "deltas are down",
            );
            return Box::pin(std::future::ready(Err(refused)));
        }
        self.0.send(request, timeout)
    }
}

#[tokio::test]
async fn live_deltas_are_best_effort_a_failing_publish_loses_nothing() {
    let _trace = trace_init();
    let stub = LlmStub::start().await;
    stub.set_chunk_delay(Duration::from_millis(30));
    let kernel = DevKernel::start().await.unwrap();
    let agent = rebuno::Agent::builder("asker")
        .secret(SECRET)
        .base_url(kernel.url())
        .transport(NoDeltas(
            rebuno::transport::ReqwestTransport::new().unwrap(),
        ))
        .handler(|input: Value| async move { ask(&input).await })
        .build()
        .unwrap();
    let served = serve(agent).await;
    kernel
        .register_agent(AgentSpec::new("asker", served.webhook_url(), SECRET))
        .unwrap();

    let done = run(
        &kernel,
        "asker",
        json!({ "url": stub.chat_url(), "stream": true }),
    )
    .await;

    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    let text = done.output.unwrap()["text"].as_str().unwrap().to_owned();
    assert!(
        text.ends_with("data: [DONE]\n\n"),
        "the consumer got every chunk"
    );
    let step = serde_json::to_value(&kernel.steps(&done.id)[0]).unwrap();
    assert_eq!(
        step["result"]["body"], text,
        "and the whole answer was recorded"
    );
    served.shutdown().await;
}

/// A policy that allows 10 tokens of LLM calls per execution: the stub's answer reports 16.
const BUDGET: &str = "default_action: allow\nrules:\n  - id: llm-budget\n    when: { step_kind: llm_call }\n    then: { decision: allow, budget: { max_tokens: 10 } }\n";

/// One streamed question through the path `input["path"]` names: `fetch` (`llm::fetch`), or a
/// `DurableLlm` with `include_usage` as `input["include_usage"]` says (unset: the default).
/// Read to its end (the answer and its usage are recorded before the end shows): its status,
/// or `"denied"`.
async fn ask_streamed(input: &Value, question: &str) -> Result<Value, HandlerError> {
    let body = json!({
        "model": "gpt-test",
        "messages": [{ "role": "user", "content": question }],
        "stream": true,
    });
    let request = http::Request::post(input["url"].as_str().unwrap_or_default())
        .header("content-type", "application/json")
        .body(Bytes::from(body.to_string()))?;
    let sent = if input["path"] == "fetch" {
        rebuno::llm::fetch(request).await
    } else {
        let transport = rebuno::transport::HyperTransport::new()?;
        let mut llm = rebuno::llm::DurableLlm::from_transport(transport);
        if let Some(include) = input["include_usage"].as_bool() {
            llm = llm.include_usage(include);
        }
        llm.send(request).await
    };
    // A denied call is an error on these raw paths.
    match sent {
        Ok(answer) => {
            let status = answer.status().as_u16();
            answer.into_body().text().await?;
            Ok(json!(status))
        }
        Err(error) if error.kind() == rebuno::ErrorKind::Policy => Ok(json!("denied")),
        Err(error) => Err(error.into()),
    }
}

/// Serves agent `budgeted` under [`BUDGET`]: it asks twice (see [`ask_streamed`]); with
/// `"off_first"`, its first delivery asks once without usage and hangs.
async fn budgeted(kernel: &DevKernel) -> Served {
    let agent = agent(kernel, "budgeted")
        .handler(|mut input: Value| async move {
            if input["off_first"] == true && rebuno::execution()?.dispatch_attempt() == 1 {
                input["include_usage"] = json!(false);
                ask_streamed(&input, "first").await?;
                std::future::pending::<()>().await;
            }
            let mut answers = Vec::new();
            for question in ["first", "second"] {
                answers.push(ask_streamed(&input, question).await?);
            }
            Ok::<_, HandlerError>(json!(answers))
        })
        .build()
        .unwrap();
    let served = serve(agent).await;
    let spec = AgentSpec::new("budgeted", served.webhook_url(), SECRET).policy_yaml(BUDGET);
    kernel.register_agent(spec).unwrap();
    served
}

/// The first succeeded `llm_call` step of `id`, as stored.
fn first_call(kernel: &DevKernel, id: &str) -> Value {
    kernel
        .steps(id)
        .into_iter()
        .find(|s| s.status == "succeeded")
        .map(|s| serde_json::to_value(s).unwrap())
        .expect("the first call was recorded")
}

/// A token budget stops a streamed call through `llm::fetch` and through a `DurableLlm`,
/// neither of which sets an option: the stream asks for its usage, the kernel meters the
/// recorded answer, and the call after the budget is spent is denied.
#[tokio::test]
async fn a_token_budget_stops_streamed_calls_without_any_option() {
    let stub = LlmStub::start().await;
    let kernel = DevKernel::start().await.unwrap();
    let served = budgeted(&kernel).await;

    for path in ["fetch", "durable_llm"] {
        let input = json!({ "url": stub.chat_url(), "path": path });
        let done = run(&kernel, "budgeted", input).await;
        assert_eq!(
            done.output,
            Some(json!([200, "denied"])),
            "{path}: the second call was refused: {done:?}"
        );
        let denied = kernel
            .events(&done.id)
            .into_iter()
            .find(|e| e.kind == "step.denied")
            .expect("the budget denied the second call");
        assert!(denied.payload.to_string().contains("budget"), "{denied:?}");
        let first = first_call(&kernel, &done.id);
        assert_eq!(
            (first["usage_input"].clone(), first["usage_output"].clone()),
            (json!(12), json!(4)),
            "{path}: the recorded stream carries its usage: {first:#}"
        );
        assert_eq!(
            first["args"],
            json!({ "model": "gpt-test", "messages": [{ "role": "user", "content": "first" }], "stream": true }),
            "{path}: the step's args are the request as built, so its id is too"
        );
    }
    let sent = stub.requests();
    assert!(
        sent.iter()
            .all(|r| r["stream_options"] == json!({ "include_usage": true })),
        "what reached the provider asked for usage: {sent:#?}"
    );
    served.shutdown().await;
    kernel.shutdown().await;
}

/// `include_usage(false)` sends the request as built: no usage, nothing to count.
#[tokio::test]
async fn a_stream_that_turned_usage_off_reports_none_and_the_budget_cannot_count_it() {
    let stub = LlmStub::start().await;
    let kernel = DevKernel::start().await.unwrap();
    let served = budgeted(&kernel).await;

    let input = json!({ "url": stub.chat_url(), "include_usage": false });
    let done = run(&kernel, "budgeted", input).await;

    assert_eq!(done.output, Some(json!([200, 200])), "{done:?}");
    assert!(
        stub.requests()
            .iter()
            .all(|r| r.get("stream_options").is_none())
    );
    served.shutdown().await;
    kernel.shutdown().await;
}

/// A call recorded without the usage option (by a version that did not ask, or with it
/// off) replays when the run now asks: the step's identity does not depend on the option.
#[tokio::test]
async fn a_call_recorded_without_the_usage_option_replays_when_the_run_asks() {
    let stub = LlmStub::start().await;
    let kernel = DevKernel::start().await.unwrap();
    let served = budgeted(&kernel).await;
    let input = json!({ "url": stub.chat_url(), "off_first": true });
    let created = kernel
        .create_execution(NewExecution::new("budgeted", input))
        .await
        .unwrap();
    for _ in 0..2000 {
        if kernel
            .steps(&created.id)
            .iter()
            .any(|s| s.status == "succeeded")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    kernel.redeliver(&created.id).unwrap();
    let done = kernel.wait_terminal(&created.id, WAIT).await.unwrap();

    assert_eq!(
        done.output,
        Some(json!([200, 200])),
        "the first call replayed (its record has no usage, so the budget had nothing to \
         count), the second went out: {done:?}"
    );
    let sent = stub.requests();
    assert_eq!(
        sent.len(),
        2,
        "the replay did not reach the provider: {sent:#?}"
    );
    assert!(sent[0].get("stream_options").is_none());
    assert_eq!(sent[1]["stream_options"]["include_usage"], true);
    served.shutdown().await;
    kernel.shutdown().await;
}

/// A provider that refuses the request asking for usage (a gateway rejecting options it does
/// not know) gets it again as the caller built it, in the same step.
#[tokio::test]
async fn a_provider_refusing_the_usage_option_gets_the_request_as_built() {
    let stub = LlmStub::start().await;
    stub.fault(Fault::Status(400));
    let asker = asker(None, false).await;

    let id = asker
        .create(json!({ "url": stub.chat_url(), "stream": true }))
        .await;
    let done = asker.kernel.wait_terminal(&id, WAIT).await.unwrap();

    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    assert_eq!(done.output.unwrap()["status"], 200);
    let sent = stub.requests();
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert_eq!(sent[0]["stream_options"]["include_usage"], true);
    assert!(sent[1].get("stream_options").is_none(), "as built");
    assert_eq!(asker.llm_step(&id)["result"]["status"], 200);
    asker.served.shutdown().await;
}
