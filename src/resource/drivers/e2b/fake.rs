//! An in-memory [`Transport`] for the driver's tests: it records every request and answers
//! with canned responses, in order.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method};
use serde_json::{Value, json};

use super::{E2bSandbox, Sandbox};
use crate::error::BoxError;
use crate::resource::ResourceDriver;
use crate::transport::{
    ByteStream, StreamingFuture, Transport, TransportError, TransportErrorKind, TransportFuture,
};

/// The API key the tests use: it must never show up in any text.
pub(super) const KEY: &str = "e2b_test_key_never_printed";

/// A canned answer.
#[derive(Debug)]
pub(super) enum Answer {
    /// A status and a JSON body.
    Json(u16, Value),
    /// A status and an empty body.
    Empty(u16),
    /// A status and a body in chunks, possibly failing part-way.
    Stream(u16, Vec<Result<Bytes, BoxError>>),
}

/// A request the fake saw.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    pub(super) method: Method,
    pub(super) url: String,
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
    pub(super) timeout: Duration,
}

impl Seen {
    /// A header's value, as text.
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as JSON.
    pub(super) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    /// A Connect stream request's one envelope, as JSON (past its 5-byte header).
    pub(super) fn envelope_json(&self) -> Value {
        serde_json::from_slice(&self.body[5..]).unwrap()
    }
}

#[derive(Debug, Default)]
struct State {
    answers: VecDeque<Answer>,
    seen: Vec<Seen>,
}

/// The fake transport; clones share their state.
#[derive(Debug, Clone, Default)]
pub(super) struct Fake {
    state: Arc<Mutex<State>>,
}

impl Fake {
    /// Queues the answer to the next request.
    pub(super) fn answer(&self, answer: Answer) -> &Self {
        self.state.lock().unwrap().answers.push_back(answer);
        self
    }

    /// Every request so far, and forgets them.
    pub(super) fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut self.state.lock().unwrap().seen)
    }

    /// A driver sending through this fake.
    pub(super) fn driver(&self) -> E2bSandbox {
        E2bSandbox::new(KEY).transport(self.clone())
    }

    /// A sandbox `i1` (access token `token-1`) created through this fake; its requests
    /// forgotten.
    pub(super) async fn sandbox(&self) -> Sandbox {
        self.answer(Answer::Json(201, sandbox_json("i1", "token-1", None)));
        let (sandbox, _) = self.driver().create(None).await.unwrap();
        self.take();
        sandbox
    }

    fn next(&self, request: http::Request<Bytes>, timeout: Duration) -> Option<Answer> {
        let (head, body) = request.into_parts();
        let mut state = self.state.lock().unwrap();
        state.seen.push(Seen {
            method: head.method,
            url: head.uri.to_string(),
            headers: head.headers,
            body,
            timeout,
        });
        state.answers.pop_front()
    }
}

/// A `Sandbox` answer of the API.
pub(super) fn sandbox_json(id: &str, token: &str, domain: Option<&str>) -> Value {
    json!({
        "templateID": "base", "sandboxID": id, "clientID": "c", "envdVersion": "0.5.4",
        "envdAccessToken": token, "domain": domain,
    })
}

/// A Connect envelope with `flags` around `json`.
pub(super) fn frame(flags: u8, json: &Value) -> Vec<u8> {
    let text = json.to_string();
    let mut out = vec![flags];
    out.extend_from_slice(&u32::try_from(text.len()).unwrap().to_be_bytes());
    out.extend_from_slice(text.as_bytes());
    out
}

fn no_answer() -> TransportError {
    TransportError::new(TransportErrorKind::Connect, "the fake has no answer queued")
}

fn response<B>(status: u16, body: B) -> http::Response<B> {
    let mut response = http::Response::new(body);
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
    response
}

impl Transport for Fake {
    fn send(&self, request: http::Request<Bytes>, timeout: Duration) -> TransportFuture {
        let answer = self.next(request, timeout);
        Box::pin(async move {
            match answer.ok_or_else(no_answer)? {
                Answer::Json(status, body) => Ok(response(status, Bytes::from(body.to_string()))),
                Answer::Empty(status) => Ok(response(status, Bytes::new())),
                Answer::Stream(status, chunks) => {
                    let mut body = Vec::new();
                    for chunk in chunks {
                        body.extend_from_slice(
                            &chunk
                                .map_err(|e| TransportError::new(TransportErrorKind::Other, e))?,
                        );
                    }
                    Ok(response(status, Bytes::from(body)))
                }
            }
        })
    }

    fn send_streaming(&self, request: http::Request<Bytes>, timeout: Duration) -> StreamingFuture {
        let answer = self.next(request, timeout);
        Box::pin(async move {
            let (status, chunks) = match answer.ok_or_else(no_answer)? {
                Answer::Json(status, body) => (status, vec![Ok(Bytes::from(body.to_string()))]),
                Answer::Empty(status) => (status, Vec::new()),
                Answer::Stream(status, chunks) => (status, chunks),
            };
            let body: ByteStream = Box::pin(futures_util::stream::iter(chunks));
            Ok(response(status, body))
        })
    }
}
