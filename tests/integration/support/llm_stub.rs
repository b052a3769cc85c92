//! An OpenAI-style chat-completions provider on loopback, for the durable-LLM tests.
//!
//! `POST /v1/chat/completions` answers a `chat.completion` JSON object, or, when the request
//! body has `"stream": true`, `text/event-stream` `chat.completion.chunk` events ending with
//! `data: [DONE]`, each written as its own body frame after a configurable delay. It counts
//! every request (any path) and keeps their JSON bodies. Faults queued with
//! [`LlmStub::fault`] apply to the next requests, one each.
//!
//! ```ignore
//! let stub = LlmStub::start().await;
//! stub.set_reply("Bonjour, café ☕");
//! stub.split_utf8(true);
//! stub.fault(Fault::CloseMidStream { after_chunks: 2 });
//! // ... point the client at stub.chat_url() ...
//! assert_eq!(stub.hits(), 1);
//! ```

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{Value, json};
use tokio::net::TcpListener;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = BoxBody<Bytes, BoxError>;

/// The reply text until [`LlmStub::set_reply`] changes it.
pub const DEFAULT_REPLY: &str = "Hello from the stub";

/// A misbehaviour for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answer this status with an OpenAI-style error body (`{"error": {...}}`).
    Status(u16),
    /// Write `after_chunks` body frames (capped at the frame count), then abort the connection
    /// without ending the chunked body, so the client sees a body error. A JSON answer is
    /// written in two halves, and aborted after at most the first.
    CloseMidStream { after_chunks: usize },
    /// Wait this long before sending the response head.
    SlowFirstByte(Duration),
    /// Answer `status` with an OpenAI-style error body and `Retry-After: <retry_after>`.
    Throttle { status: u16, retry_after: String },
}

struct Config {
    reply: String,
    chunk_delay: Duration,
    chunk_chars: Option<usize>,
    split_utf8: bool,
}

struct State {
    hits: AtomicUsize,
    chats: AtomicUsize,
    requests: Mutex<Vec<Value>>,
    traceparents: Mutex<Vec<Option<String>>>,
    faults: Mutex<VecDeque<Fault>>,
    config: Mutex<Config>,
}

/// A running stub; the accept loop stops when it is dropped.
pub struct LlmStub {
    url: String,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for LlmStub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LlmStub {
    /// Binds 127.0.0.1:0 and serves on the current Tokio runtime.
    pub async fn start() -> LlmStub {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind stub");
        let url = format!("http://{}", listener.local_addr().expect("stub addr"));
        let state = Arc::new(State {
            hits: AtomicUsize::new(0),
            chats: AtomicUsize::new(0),
            requests: Mutex::new(Vec::new()),
            traceparents: Mutex::new(Vec::new()),
            faults: Mutex::new(VecDeque::new()),
            config: Mutex::new(Config {
                reply: DEFAULT_REPLY.to_owned(),
                chunk_delay: Duration::from_millis(5),
                chunk_chars: None,
                split_utf8: false,
            }),
        });
        let shared = Arc::clone(&state);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = Arc::clone(&shared);
                let service = hyper::service::service_fn(move |request| {
                    let state = Arc::clone(&state);
                    async move { Ok::<_, Infallible>(handle(&state, request).await) }
                });
                tokio::spawn(async move {
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        LlmStub { url, state, task }
    }

    /// The base URL, `http://127.0.0.1:PORT` (no trailing slash).
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// `url() + "/v1/chat/completions"`.
    pub fn chat_url(&self) -> String {
        format!("{}/v1/chat/completions", self.url)
    }

    /// Requests received so far, on every path.
    pub fn hits(&self) -> usize {
        self.state.hits.load(Ordering::SeqCst)
    }

    /// The request bodies received so far, in order (JSON, or a string when not JSON).
    pub fn requests(&self) -> Vec<Value> {
        self.state.requests.lock().unwrap().clone()
    }

    /// The `traceparent` header of each request received, in order.
    pub fn traceparents(&self) -> Vec<Option<String>> {
        self.state.traceparents.lock().unwrap().clone()
    }

    /// The current reply text.
    pub fn reply(&self) -> String {
        self.config().reply.clone()
    }

    /// Sets the reply text (long ones welcome: `"x".repeat(5000)`).
    pub fn set_reply(&self, reply: impl Into<String>) {
        self.config().reply = reply.into();
    }

    /// The pause before each streamed frame after the first (default 5 ms).
    pub fn set_chunk_delay(&self, delay: Duration) {
        self.config().chunk_delay = delay;
    }

    /// Characters per content delta; by default the reply is cut in about 16 pieces of at
    /// least 5 characters each.
    pub fn set_chunk_chars(&self, chars: usize) {
        self.config().chunk_chars = Some(chars.max(1));
    }

    /// When on, every SSE event holding a multi-byte UTF-8 character is written as two frames
    /// cut in the middle of its first such character (give the reply a non-ASCII character).
    pub fn split_utf8(&self, on: bool) {
        self.config().split_utf8 = on;
    }

    /// Queues a fault for the next request that has none yet.
    pub fn fault(&self, fault: Fault) {
        self.state.faults.lock().unwrap().push_back(fault);
    }

    fn config(&self) -> std::sync::MutexGuard<'_, Config> {
        self.state.config.lock().unwrap()
    }
}

/// Everything one chat answer is built from, read under the lock at request time.
struct Answer {
    id: String,
    model: String,
    reply: String,
    usage: Value,
}

impl Answer {
    /// The answer to the `n`th chat request, for `model`, saying `reply`.
    fn new(n: usize, model: &str, reply: String) -> Self {
        let words = reply.split_whitespace().count().max(1);
        Self {
            id: format!("chatcmpl-stub-{n}"),
            model: model.to_owned(),
            usage: json!({ "prompt_tokens": 12, "completion_tokens": words, "total_tokens": 12 + words }),
            reply,
        }
    }

    fn event(&self, choices: Value, usage: Option<&Value>) -> String {
        let mut event = json!({
            "id": self.id, "object": "chat.completion.chunk", "created": CREATED,
            "model": self.model, "choices": choices,
        });
        if let Some(usage) = usage {
            event["usage"] = usage.clone();
        }
        format!("data: {event}\n\n")
    }

    fn delta(&self, delta: Value, finish: Value) -> String {
        self.event(
            json!([{ "index": 0, "delta": delta, "finish_reason": finish }]),
            None,
        )
    }

    /// The SSE events: a role delta, the content deltas, a `stop` delta, an optional usage
    /// chunk (`stream_options.include_usage`), then `[DONE]`.
    fn events(&self, chunk_chars: Option<usize>, include_usage: bool) -> Vec<String> {
        let mut events =
            vec![self.delta(json!({ "role": "assistant", "content": "" }), Value::Null)];
        for piece in pieces(&self.reply, chunk_chars) {
            events.push(self.delta(json!({ "content": piece }), Value::Null));
        }
        events.push(self.delta(json!({}), json!("stop")));
        if include_usage {
            events.push(self.event(json!([]), Some(&self.usage)));
        }
        events.push("data: [DONE]\n\n".to_owned());
        events
    }

    fn completion(&self) -> Value {
        json!({
            "id": self.id, "object": "chat.completion", "created": CREATED, "model": self.model,
            "choices": [{
                "index": 0,
                "message": { "role": "assistant", "content": self.reply },
                "finish_reason": "stop",
            }],
            "usage": self.usage,
        })
    }
}

/// The body a stub with the default settings sends for its `n`th chat request to model
/// `gpt-test` from this SDK: the `chat.completion` object, or (`stream`) its events, the usage
/// chunk the SDK asks for by default, and `[DONE]` joined.
pub fn default_answer(n: usize, stream: bool) -> String {
    let answer = Answer::new(n, "gpt-test", DEFAULT_REPLY.to_owned());
    if stream {
        answer.events(None, true).concat()
    } else {
        answer.completion().to_string()
    }
}

/// The fixed `created` timestamp of every answer (bodies stay reproducible).
const CREATED: u64 = 1_700_000_000;

async fn handle(state: &State, request: http::Request<Incoming>) -> http::Response<Body> {
    state.hits.fetch_add(1, Ordering::SeqCst);
    let traceparent = request
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    state.traceparents.lock().unwrap().push(traceparent);
    let chat =
        request.method() == http::Method::POST && request.uri().path() == "/v1/chat/completions";
    let raw = request.into_body().collect().await.map(|b| b.to_bytes());
    let raw = raw.unwrap_or_default();
    let body = serde_json::from_slice::<Value>(&raw)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&raw).into_owned()));
    state.requests.lock().unwrap().push(body.clone());
    if !chat {
        return json_response(404, &error_body(404, "no such path on the stub"));
    }
    let n = state.chats.fetch_add(1, Ordering::SeqCst) + 1;
    let fault = state.faults.lock().unwrap().pop_front();
    let (reply, delay, chunk_chars, split) = {
        let c = state.config.lock().unwrap();
        (c.reply.clone(), c.chunk_delay, c.chunk_chars, c.split_utf8)
    };
    let mut close_after = None;
    match fault {
        Some(Fault::Status(status)) => {
            let message = format!("stub fault: status {status}");
            return json_response(status, &error_body(status, &message));
        }
        Some(Fault::SlowFirstByte(wait)) => tokio::time::sleep(wait).await,
        Some(Fault::Throttle {
            status,
            retry_after,
        }) => {
            let message = format!("stub fault: status {status}, retry after {retry_after}");
            let mut response = json_response(status, &error_body(status, &message));
            let value = http::HeaderValue::from_str(&retry_after).unwrap();
            response.headers_mut().insert("retry-after", value);
            return response;
        }
        Some(Fault::CloseMidStream { after_chunks }) => close_after = Some(after_chunks),
        None => {}
    }
    let answer = Answer::new(n, body["model"].as_str().unwrap_or("gpt-test"), reply);
    let streamed = body["stream"] == Value::Bool(true);
    let frames: Vec<Bytes> = if streamed {
        let include_usage = body["stream_options"]["include_usage"] == Value::Bool(true);
        let mut frames = Vec::new();
        for event in answer.events(chunk_chars, include_usage) {
            let bytes = Bytes::from(event);
            match bytes.iter().position(|b| *b >= 0x80) {
                // `at` is a multi-byte character's lead byte: cut right after it.
                Some(at) if split => {
                    frames.push(bytes.slice(..=at));
                    frames.push(bytes.slice(at + 1..));
                }
                _ => frames.push(bytes),
            }
        }
        frames
    } else if close_after.is_none() {
        return json_response(200, &answer.completion());
    } else {
        // A JSON answer to abort: written in two halves, aborted after at most the first.
        close_after = close_after.map(|n| n.min(1));
        let text = Bytes::from(answer.completion().to_string());
        vec![text.slice(..text.len() / 2), text.slice(text.len() / 2..)]
    };
    let content_type = if streamed {
        "text/event-stream"
    } else {
        "application/json"
    };
    let mut response = http::Response::new(timed_body(frames, delay, close_after));
    let headers = response.headers_mut();
    headers.insert("content-type", content_type.parse().unwrap());
    headers.insert("cache-control", "no-cache".parse().unwrap());
    response
}

/// A chunked body writing `frames` one by one, `delay` apart; with `close_after = Some(k)` it
/// yields an error after `min(k, frames)` frames, so hyper aborts the connection without the
/// terminating chunk.
fn timed_body(frames: Vec<Bytes>, delay: Duration, close_after: Option<usize>) -> Body {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(1);
    tokio::spawn(async move {
        for (i, frame) in frames.into_iter().enumerate() {
            if close_after == Some(i) {
                break;
            }
            if i > 0 && !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if tx.send(Ok(Frame::data(frame))).await.is_err() {
                return;
            }
        }
        if close_after.is_some() {
            let abort: BoxError = "stub: connection closed mid-stream".into();
            let _ = tx.send(Err(abort)).await;
        }
    });
    let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    BodyExt::boxed(StreamBody::new(stream))
}

/// Cuts `reply` into content deltas on character boundaries.
fn pieces(reply: &str, chunk_chars: Option<usize>) -> Vec<String> {
    let chars: Vec<char> = reply.chars().collect();
    let size = chunk_chars.unwrap_or_else(|| chars.len().div_ceil(16).max(5));
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// An OpenAI-style error object for `status`.
fn error_body(status: u16, message: &str) -> Value {
    let kind = match status {
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        _ => "server_error",
    };
    json!({ "error": { "message": message, "type": kind, "param": null, "code": null } })
}

fn json_response(status: u16, body: &Value) -> http::Response<Body> {
    let full = Full::new(Bytes::from(body.to_string())).map_err(|never| match never {});
    let mut response = http::Response::new(BodyExt::boxed(full));
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
    response
        .headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    response
}
