//! The loopback LLM provider stub (`support::llm_stub`) checked with plain reqwest: JSON and
//! SSE answers, UTF-8 split across frames, faults, the hit counter and request capture.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::llm_stub::{DEFAULT_REPLY, Fault, LlmStub};

fn chat(prompt: &str, stream: bool) -> Value {
    json!({ "model": "gpt-test", "messages": [{ "role": "user", "content": prompt }], "stream": stream })
}

async fn post(stub: &LlmStub, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(stub.chat_url())
        .json(body)
        .send()
        .await
        .expect("request")
}

/// Reads a streamed answer frame by frame: the raw chunks as received, or the body error.
async fn chunks(mut response: reqwest::Response) -> Result<Vec<bytes::Bytes>, reqwest::Error> {
    let mut chunks = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        chunks.push(chunk);
    }
    Ok(chunks)
}

/// The `data:` payloads of an SSE body, and the concatenated `choices[0].delta.content`.
fn sse(body: &str) -> (Vec<String>, String) {
    let data: Vec<String> = body
        .split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .map(str::to_owned)
        .collect();
    let content = data
        .iter()
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    (data, content)
}

#[tokio::test]
async fn json_answer() {
    let stub = LlmStub::start().await;
    assert!(stub.chat_url().starts_with("http://127.0.0.1:"));
    let response = post(&stub, &chat("hi", false)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "gpt-test");
    assert_eq!(body["choices"][0]["message"]["content"], DEFAULT_REPLY);
    assert!(body["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    assert!(body["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    assert_eq!(stub.hits(), 1);
    assert_eq!(stub.requests(), vec![chat("hi", false)]);
}

#[tokio::test]
async fn sse_answer_reassembles() {
    let stub = LlmStub::start().await;
    stub.set_reply("The quick brown fox jumps over the lazy dog, twice over.");
    let response = post(&stub, &chat("hi", true)).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let chunks = chunks(response).await.expect("a complete stream");
    assert!(chunks.len() > 3, "each event is its own frame: {chunks:?}");
    let body = String::from_utf8(chunks.concat()).unwrap();
    let (data, content) = sse(&body);
    assert_eq!(data.last().unwrap(), "[DONE]");
    assert!(body.ends_with("data: [DONE]\n\n"));
    assert_eq!(content, stub.reply());
    let first: Value = serde_json::from_str(&data[0]).unwrap();
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
}

#[tokio::test]
async fn long_reply_with_usage_chunk() {
    let stub = LlmStub::start().await;
    stub.set_reply("x".repeat(5000));
    stub.set_chunk_delay(Duration::ZERO);
    let mut body = chat("hi", true);
    body["stream_options"] = json!({ "include_usage": true });
    let text = post(&stub, &body).await.text().await.unwrap();
    let (data, content) = sse(&text);
    assert_eq!(content, "x".repeat(5000));
    let usage: Value = serde_json::from_str(&data[data.len() - 2]).unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["completion_tokens"].is_u64());
}

#[tokio::test]
async fn utf8_split_across_frames() {
    let stub = LlmStub::start().await;
    stub.set_reply("Bonjour, café crème ☕ 🎉!");
    stub.set_chunk_chars(3);
    stub.split_utf8(true);
    // Frames far enough apart that the client reads each one on its own.
    stub.set_chunk_delay(Duration::from_millis(40));
    let chunks = chunks(post(&stub, &chat("hi", true)).await).await.unwrap();
    assert!(
        chunks.iter().any(|c| std::str::from_utf8(c).is_err()),
        "some frame ends inside a character"
    );
    let (_, content) = sse(&String::from_utf8(chunks.concat()).unwrap());
    assert_eq!(content, stub.reply());
}

#[tokio::test]
async fn close_mid_stream_is_a_body_error() {
    let stub = LlmStub::start().await;
    stub.fault(Fault::CloseMidStream { after_chunks: 2 });
    let response = post(&stub, &chat("hi", true)).await;
    assert_eq!(response.status(), 200);
    let mut response = response;
    let mut received = Vec::new();
    let error = loop {
        match response.chunk().await {
            Ok(Some(chunk)) => received.push(chunk),
            Ok(None) => panic!("the stream ended cleanly"),
            Err(e) => break e,
        }
    };
    // reqwest reports hyper's "unexpected EOF during chunk size line" as a decode error.
    assert!(error.is_decode() || error.is_body(), "{error:?}");
    let received = String::from_utf8(received.concat()).unwrap();
    assert_eq!(received.matches("data: ").count(), 2, "{received}");
    assert!(!received.contains("[DONE]"));

    // The fault was for one request only; a JSON answer can be cut as well.
    let again = chunks(post(&stub, &chat("hi", true)).await).await;
    assert!(again.is_ok());
    stub.fault(Fault::CloseMidStream { after_chunks: 5 });
    let cut = post(&stub, &chat("hi", false)).await.text().await;
    assert!(cut.is_err());
    assert_eq!(stub.hits(), 3);
}

#[tokio::test]
async fn status_and_slow_faults() {
    let stub = LlmStub::start().await;
    stub.fault(Fault::Status(429));
    stub.fault(Fault::Status(500));
    stub.fault(Fault::SlowFirstByte(Duration::from_millis(300)));

    let response = post(&stub, &chat("a", false)).await;
    assert_eq!(response.status(), 429);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error");

    let response = post(&stub, &chat("b", true)).await;
    assert_eq!(response.status(), 500);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "server_error");

    let started = Instant::now();
    let response = post(&stub, &chat("c", false)).await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(response.status(), 200);

    let response = post(&stub, &chat("d", false)).await;
    assert_eq!(response.status(), 200);

    let other = reqwest::get(format!("{}/v1/models", stub.url()))
        .await
        .unwrap();
    assert_eq!(other.status(), 404);
    assert_eq!(stub.hits(), 5);
    let prompts: Vec<Value> = stub
        .requests()
        .iter()
        .map(|r| r["messages"][0]["content"].clone())
        .collect();
    assert_eq!(
        prompts,
        vec![json!("a"), json!("b"), json!("c"), json!("d"), Value::Null]
    );
}
