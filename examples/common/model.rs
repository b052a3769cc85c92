//! A scripted OpenAI-compatible chat model on a loopback port, so LLM examples run offline.
//!
//! `POST /v1/chat/completions` answers turn `n` of the script, where `n` counts the `tool`
//! messages already in the conversation: either one tool call or a final text answer, in the
//! chat-completions shape real providers use. A request with `"stream": true` gets the text
//! word by word as server-sent `chat.completion.chunk` events, ending with `data: [DONE]`.

#![allow(dead_code, clippy::disallowed_methods)] // examples are hosts: they may spawn

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// What the scripted model says on one turn.
pub(crate) enum Reply {
    /// Call `name` with these arguments.
    Tool(&'static str, Value),
    /// Answer with text.
    Text(&'static str),
}

/// The model an example talks to: an OpenAI-compatible chat-completions base URL, a model
/// name and maybe a key.
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub(crate) base_url: String,
    pub(crate) name: String,
    pub(crate) api_key: Option<String>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key itself.
        f.debug_struct("Endpoint")
            .field("base_url", &self.base_url)
            .field("name", &self.name)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Endpoint {
    /// The API key, or a placeholder for endpoints that need none (clients insist on one).
    pub(crate) fn key(&self) -> String {
        self.api_key.clone().unwrap_or_else(|| "not-needed".into())
    }
}

/// Prints a streamed piece of text as it arrives and appends it to `answer`.
pub(crate) fn echo(answer: &mut String, text: &str) {
    use std::io::Write;
    print!("{text}");
    let _ = std::io::stdout().flush();
    answer.push_str(text);
}

/// Serves `agent` (bound already) on `kernel`, asks it `question` as `{"question": ...}`,
/// prints the outcome and the event log, and stops the kernel.
pub(crate) async fn ask_once(
    kernel: rebuno_devkernel::DevKernel,
    agent: rebuno::Agent,
    endpoint: &Endpoint,
    question: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let agent_id = agent.id().to_owned();
    crate::common::serve(&kernel, agent, None).await?;
    println!(
        "dev kernel at {}, model {} at {}\n",
        kernel.url(),
        endpoint.name,
        endpoint.base_url
    );
    let input = json!({ "question": question });
    let created = kernel
        .create_execution(rebuno_devkernel::NewExecution::new(agent_id, input))
        .await?;
    let done = crate::common::finish(&kernel, &created.id).await?;
    crate::common::report(&done, &kernel.events(&done.id));
    kernel.shutdown().await;
    Ok(())
}

/// `LLM_BASE_URL` (with `LLM_MODEL`, default `gpt-4o-mini`, and `OPENAI_API_KEY` when set), or
/// else `script` served on loopback as model `scripted`.
pub(crate) async fn endpoint(script: fn(usize) -> Reply) -> std::io::Result<Endpoint> {
    let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
    if let Some(base_url) = var("LLM_BASE_URL") {
        return Ok(Endpoint {
            base_url: base_url.trim_end_matches('/').to_owned(),
            name: var("LLM_MODEL").unwrap_or_else(|| "gpt-4o-mini".into()),
            api_key: var("OPENAI_API_KEY"),
        });
    }
    Ok(Endpoint {
        base_url: serve(script).await?,
        name: "scripted".into(),
        api_key: None,
    })
}

/// Serves `script` and returns the base URL (`http://127.0.0.1:PORT/v1`).
pub(crate) async fn serve(script: fn(usize) -> Reply) -> std::io::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}/v1", listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = hyper::service::service_fn(move |request| answer(request, script));
            tokio::spawn(
                auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(TokioIo::new(stream), service)
                    .into_owned(),
            );
        }
    });
    Ok(base)
}

async fn answer(
    request: http::Request<hyper::body::Incoming>,
    script: fn(usize) -> Reply,
) -> Result<http::Response<Full<Bytes>>, Infallible> {
    let body = request.into_body().collect().await.map(|b| b.to_bytes());
    let body: Value = serde_json::from_slice(&body.unwrap_or_default()).unwrap_or_default();
    let turn = body["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
    let reply = script(turn);
    if body["stream"] == true
        && let Reply::Text(text) = reply
    {
        return Ok(respond("text/event-stream", stream(&body["model"], text)));
    }
    let message = match reply {
        Reply::Tool(name, arguments) => json!({
            "role": "assistant", "content": null,
            "tool_calls": [{ "id": format!("call_{turn}"), "type": "function",
                "function": { "name": name, "arguments": arguments.to_string() } }],
        }),
        Reply::Text(text) => json!({ "role": "assistant", "content": text }),
    };
    let completion = json!({
        "id": format!("chatcmpl-script-{turn}"), "object": "chat.completion", "created": 0,
        "model": body["model"], "choices": [{ "index": 0, "message": message,
            "finish_reason": if message["tool_calls"].is_null() { "stop" } else { "tool_calls" } }],
        "usage": { "prompt_tokens": 20 + 10 * turn, "completion_tokens": 12 },
    });
    Ok(respond("application/json", completion.to_string()))
}

/// `text` as chat-completion chunks, a word each, then a `stop` chunk and `[DONE]`.
fn stream(model: &Value, text: &str) -> String {
    let chunk = |delta: Value, finish: Value| {
        let chunk = json!({ "id": "chatcmpl-script", "object": "chat.completion.chunk",
            "created": 0, "model": model,
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }] });
        format!("data: {chunk}\n\n")
    };
    let mut events: Vec<String> = text
        .split_inclusive(' ')
        .map(|word| chunk(json!({ "content": word }), Value::Null))
        .collect();
    events.push(chunk(json!({}), json!("stop")));
    events.push("data: [DONE]\n\n".to_owned());
    events.concat()
}

fn respond(content_type: &'static str, body: String) -> http::Response<Full<Bytes>> {
    let mut response = http::Response::new(Full::new(Bytes::from(body)));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    response
}
