//! Reading the server's answer to a request: one JSON body, or an event stream that may carry
//! the server's own requests and notifications before the response.

use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderValue, StatusCode, header};
use serde_json::Value;

use super::message::{self, Incoming, RpcError};
use super::session::{Negotiated, SESSION_HEADER, Session};
use crate::error::{Error, ErrorKind};
use crate::sse::SseBuffer;
use crate::transport::{ByteStream, TransportError};

/// The most of an answer (JSON body or event stream) the client reads (a tool result with
/// images is base64 in JSON, so this is generous); past it the request fails instead of
/// growing without bound.
const MAX_ANSWER_BYTES: usize = 32 * 1024 * 1024;

/// How much of an unexpected body an error quotes.
const SNIPPET_CHARS: usize = 300;

/// The server's answer to one request.
#[derive(Debug)]
pub(super) struct Answer {
    /// The response's result, or its JSON-RPC error.
    pub(super) result: Result<Value, RpcError>,
    /// The session the server named in its answer's headers (`initialize` sets it).
    pub(super) session_id: Option<HeaderValue>,
}

/// Why a request got no result.
#[derive(Debug)]
pub(super) enum Failure {
    /// No HTTP answer (connection, timeout).
    Transport(TransportError),
    /// An HTTP error status, with the start of its body.
    Http { status: StatusCode, body: String },
    /// `404` on a request that named a session: the server ended it.
    SessionExpired,
    /// The answer was not the JSON-RPC response the protocol calls for.
    Protocol(String),
    /// The server answered with a JSON-RPC error.
    Rpc(RpcError),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Transport(error) => match std::error::Error::source(error) {
                Some(source) => write!(f, "{error}: {source}"),
                None => write!(f, "{error}"),
            },
            Self::Http { status, body } if body.is_empty() => write!(f, "HTTP {status}"),
            Self::Http { status, body } => write!(f, "HTTP {status}: {body}"),
            Self::SessionExpired => f.write_str("the server ended the session (HTTP 404)"),
            Self::Protocol(message) => f.write_str(message),
            Self::Rpc(error) => write!(f, "{error}"),
        }
    }
}

impl Failure {
    /// The SDK error for a failed `what` (`"initialize"`, `"tools/list"`, ...).
    pub(super) fn into_error(self, what: &str) -> Error {
        let kind = match &self {
            Self::Transport(error)
                if error.kind() == crate::transport::TransportErrorKind::Timeout =>
            {
                ErrorKind::Timeout
            }
            Self::Transport(_) | Self::Http { .. } | Self::SessionExpired => ErrorKind::Network,
            Self::Protocol(_) => ErrorKind::Protocol,
            Self::Rpc(_) => ErrorKind::Api,
        };
        let message = format!("MCP {what} failed: {self}");
        match self {
            Self::Transport(error) => Error::new(kind, message).with_source(error),
            _ => Error::new(kind, message),
        }
    }
}

/// Reads the answer to request `id` from `response`.
pub(super) async fn read_answer(
    session: &Session,
    id: u64,
    response: http::Response<ByteStream>,
    negotiated: &Negotiated,
) -> Result<Answer, Failure> {
    let (parts, body) = response.into_parts();
    let session_id = parts.headers.get(SESSION_HEADER).cloned();
    if !parts.status.is_success() {
        let body = read_start(body).await;
        return Err(Failure::Http {
            status: parts.status,
            body: snippet(&body),
        });
    }
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let result = if content_type.starts_with("text/event-stream") {
        read_stream(session, id, body, negotiated).await?
    } else if content_type.starts_with("application/json") {
        let whole = read_capped(body, MAX_ANSWER_BYTES).await?;
        read_json(id, &whole)?
    } else {
        let whole = read_start(body).await;
        return Err(Failure::Protocol(format!(
            "expected a JSON or event-stream answer, got HTTP {} with content-type {content_type:?}: {}",
            parts.status,
            snippet(&whole)
        )));
    };
    Ok(Answer { result, session_id })
}

/// The response to `id` in a JSON body: one message, or (2025-03-26) a batch holding it.
fn read_json(id: u64, body: &[u8]) -> Result<Result<Value, RpcError>, Failure> {
    let parsed: Value = serde_json::from_slice(body).map_err(|e| {
        Failure::Protocol(format!("the answer is not JSON ({e}): {}", snippet(body)))
    })?;
    let messages = match parsed {
        Value::Array(batch) => batch,
        single => vec![single],
    };
    messages
        .iter()
        .find_map(|message| match message::classify(message) {
            Some(Incoming::Response { id: their, outcome }) if message::is_our_id(&their, id) => {
                Some(outcome)
            }
            _ => None,
        })
        .ok_or_else(|| {
            Failure::Protocol(format!(
                "the answer holds no response to request {id}: {}",
                snippet(body)
            ))
        })
}

/// The response to `id` from an event stream, answering the server's requests on the way.
///
/// A stream that ends or breaks before the response, after naming an event id, is resumed:
/// after the server's `retry` delay, a `GET` with `Last-Event-ID` asks for the events after it
/// (the 2025-11-25 transport's resumability), a bounded number of times. That needs a clock,
/// so only calls inside an execution resume.
async fn read_stream(
    session: &Session,
    id: u64,
    mut body: ByteStream,
    negotiated: &Negotiated,
) -> Result<Result<Value, RpcError>, Failure> {
    let mut events = SseBuffer::default();
    let mut read = 0;
    let mut position = Position::default();
    loop {
        while let Some(event) = events.next_event() {
            position.saw(&event);
            if let Some(outcome) = response_in_event(session, id, &event.data, negotiated).await? {
                return Ok(outcome);
            }
        }
        let Some(ended) = buffer_next_chunk(&mut body, &mut events, &mut read, id).await? else {
            continue;
        };
        match super::resume::resume(session, negotiated, &mut position).await {
            Some(resumed) => {
                body = resumed?;
                events = SseBuffer::default();
            }
            None => {
                return Err(Failure::Protocol(format!(
                    "the event stream {ended} before the response to request {id}"
                )));
            }
        }
    }
}

/// The response to `id`, if `data` (one event's) is it; a request of the server's in it is
/// answered on the way, anything else passed over.
async fn response_in_event(
    session: &Session,
    id: u64,
    data: &str,
    negotiated: &Negotiated,
) -> Result<Option<Result<Value, RpcError>>, Failure> {
    // A stream may open with an event of only an id (a resumption point): no message.
    if data.trim().is_empty() {
        return Ok(None);
    }
    let message: Value = serde_json::from_str(data).map_err(|e| {
        Failure::Protocol(format!(
            "an event of the stream is not JSON ({e}): {}",
            snippet(data.as_bytes())
        ))
    })?;
    match message::classify(&message) {
        Some(Incoming::Response { id: their, outcome }) if message::is_our_id(&their, id) => {
            return Ok(Some(outcome));
        }
        Some(Incoming::Request { id: their, method }) => {
            let answer = message::answer_to_server(&their, &method);
            session.post_without_answer(&answer, negotiated).await?;
        }
        _ => {}
    }
    Ok(None)
}

/// Reads the stream's next chunk into `events`, adding its length to `read` and failing once
/// that passes [`MAX_ANSWER_BYTES`] without the response to `id`. `None` when a chunk came,
/// else how the stream stopped (`"ended"`, or `"broke (...)"`).
async fn buffer_next_chunk(
    body: &mut ByteStream,
    events: &mut SseBuffer,
    read: &mut usize,
    id: u64,
) -> Result<Option<String>, Failure> {
    match body.next().await {
        Some(Ok(chunk)) => {
            *read += chunk.len();
            if *read > MAX_ANSWER_BYTES {
                return Err(Failure::Protocol(format!(
                    "the event stream passed {MAX_ANSWER_BYTES} bytes without the response to request {id}"
                )));
            }
            events.push(&chunk);
            Ok(None)
        }
        Some(Err(error)) => Ok(Some(format!("broke ({error})"))),
        None => Ok(Some("ended".to_owned())),
    }
}

/// How far into a stream the client got: the last event id and the server's retry delay.
#[derive(Debug, Default)]
pub(super) struct Position {
    pub(super) last_event_id: Option<String>,
    pub(super) retry_ms: Option<u64>,
    pub(super) resumes: usize,
}

impl Position {
    fn saw(&mut self, event: &crate::sse::SseEvent) {
        if let Some(id) = &event.id {
            self.last_event_id = Some(id.clone());
        }
        if let Some(retry) = event.retry {
            self.retry_ms = Some(retry);
        }
    }
}

/// The body, failing past `limit` bytes.
async fn read_capped(mut body: ByteStream, limit: usize) -> Result<Bytes, Failure> {
    let mut whole = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk =
            chunk.map_err(|e| Failure::Protocol(format!("reading the answer failed: {e}")))?;
        if whole.len() + chunk.len() > limit {
            return Err(Failure::Protocol(format!(
                "the answer is larger than {limit} bytes"
            )));
        }
        whole.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(whole))
}

/// The start of an unexpected body, enough for an error message's [`snippet`]; the rest is
/// not read.
pub(super) async fn read_start(mut body: ByteStream) -> Vec<u8> {
    let mut start = Vec::new();
    while start.len() <= SNIPPET_CHARS * 4 {
        match body.next().await {
            Some(Ok(chunk)) => start.extend_from_slice(&chunk),
            _ => break,
        }
    }
    start
}

/// The start of a body, as text, for an error message.
pub(super) fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(SNIPPET_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_json_answer_or_a_batch_holding_it_gives_the_response_to_our_id() {
        let single = json!({"jsonrpc": "2.0", "id": 2, "result": {"ok": true}}).to_string();
        assert_eq!(
            read_json(2, single.as_bytes()).ok(),
            Some(Ok(json!({"ok": true})))
        );
        let batch = json!([
            {"jsonrpc": "2.0", "method": "notifications/message", "params": {}},
            {"jsonrpc": "2.0", "id": 1, "result": {"other": true}},
            {"jsonrpc": "2.0", "id": 2, "error": {"code": -32601, "message": "nope"}}
        ])
        .to_string();
        let Ok(Err(error)) = read_json(2, batch.as_bytes()) else {
            panic!("the error response to request 2");
        };
        assert_eq!(error.code, -32601);
        assert!(read_json(3, batch.as_bytes()).is_err());
        let garbage = read_json(1, b"<html>gateway</html>");
        assert!(matches!(garbage, Err(Failure::Protocol(m)) if m.contains("<html>gateway")));
    }

    #[test]
    fn snippets_are_cut_at_a_character_boundary() {
        let long = "é".repeat(SNIPPET_CHARS + 10);
        let cut = snippet(long.as_bytes());
        assert_eq!(cut.chars().count(), SNIPPET_CHARS + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(snippet(b"  short \n"), "short");
    }

    #[test]
    fn failures_name_what_failed_and_keep_their_kind() {
        let rpc = Failure::Rpc(RpcError {
            code: -32602,
            message: "Unknown tool: nope".into(),
        })
        .into_error("tools/call \"nope\"");
        assert_eq!(rpc.kind(), ErrorKind::Api);
        assert!(
            rpc.to_string()
                .contains("MCP tools/call \"nope\" failed: JSON-RPC error -32602")
        );
        let http = Failure::Http {
            status: StatusCode::UNAUTHORIZED,
            body: String::new(),
        }
        .into_error("initialize");
        assert_eq!(http.kind(), ErrorKind::Network);
        assert!(http.to_string().ends_with("HTTP 401 Unauthorized"));
    }
}
