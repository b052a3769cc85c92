//! The Connect protocol with the JSON codec, as envd speaks it: unary calls are plain JSON
//! (`application/json`, errors as a non-200 status and `{"code","message"}`); streams are
//! `application/connect+json` envelopes (a flag byte, a 4-byte big-endian length, the JSON),
//! ended by an end-stream envelope (flag `0x02`) carrying `{}` or `{"error":{...}}`.

use std::io;

use http::{HeaderMap, Response, StatusCode, header};
use serde_json::{Value, json};

use crate::body::{self, Body, ChunkSender};

/// Envelope framing.
pub(crate) mod envelope {
    use bytes::{BufMut, Bytes, BytesMut};

    /// The flag of the last envelope of a response stream.
    pub(crate) const END_STREAM: u8 = 0x02;

    /// One envelope.
    pub(crate) fn encode(flags: u8, payload: &[u8]) -> Bytes {
        let mut buf = BytesMut::with_capacity(5 + payload.len());
        buf.put_u8(flags);
        buf.put_u32(u32::try_from(payload.len()).unwrap_or(u32::MAX));
        buf.put_slice(payload);
        buf.freeze()
    }

    /// The first envelope of `buf`: its flags, its payload and what follows it.
    pub(crate) fn split(buf: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let (head, rest) = buf.split_at_checked(5)?;
        let len = usize::try_from(u32::from_be_bytes([head[1], head[2], head[3], head[4]])).ok()?;
        let (payload, tail) = rest.split_at_checked(len)?;
        Some((head[0], payload, tail))
    }
}

/// Connect error codes (the subset envd answers with).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Code {
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    FailedPrecondition,
    Unimplemented,
    Internal,
    Unauthenticated,
    Unknown,
}

impl Code {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::InvalidArgument => "invalid_argument",
            Self::DeadlineExceeded => "deadline_exceeded",
            Self::NotFound => "not_found",
            Self::AlreadyExists => "already_exists",
            Self::FailedPrecondition => "failed_precondition",
            Self::Unimplemented => "unimplemented",
            Self::Internal => "internal",
            Self::Unauthenticated => "unauthenticated",
            Self::Unknown => "unknown",
        }
    }

    /// The HTTP status of a unary error with this code (the Connect protocol's table).
    fn http_status(self) -> StatusCode {
        match self {
            Self::InvalidArgument | Self::FailedPrecondition => StatusCode::BAD_REQUEST,
            Self::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::AlreadyExists => StatusCode::CONFLICT,
            Self::Unimplemented => StatusCode::NOT_IMPLEMENTED,
            Self::Internal | Self::Unknown => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Unauthenticated => StatusCode::UNAUTHORIZED,
        }
    }
}

/// An RPC error: a code and a message.
#[derive(Clone, Debug)]
pub(crate) struct RpcError {
    pub(crate) code: Code,
    pub(crate) message: String,
}

impl RpcError {
    pub(crate) fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    fn to_json(&self) -> Value {
        json!({ "code": self.code.as_str(), "message": self.message })
    }
}

/// The result of an RPC handler.
pub(crate) type RpcResult<T = Value> = Result<T, RpcError>;

/// Whether a request is a Connect stream (`application/connect+json`), a unary JSON call, or
/// neither.
pub(crate) fn request_kind(headers: &HeaderMap) -> Option<bool> {
    let media = headers
        .get(header::CONTENT_TYPE)?
        .to_str()
        .ok()?
        .split(';')
        .next()?
        .trim()
        .to_ascii_lowercase();
    match media.as_str() {
        "application/connect+json" => Some(true),
        "application/json" => Some(false),
        _ => None,
    }
}

/// The message of a unary request body (an empty body is the empty message).
pub(crate) fn unary_message(body: &[u8]) -> RpcResult {
    if body.is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_slice(body)
        .map_err(|e| RpcError::new(Code::InvalidArgument, format!("unmarshal message: {e}")))
}

/// Every message of a streamed request body.
pub(crate) fn stream_messages(body: &[u8]) -> RpcResult<Vec<Value>> {
    let mut messages = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let (_, payload, tail) = envelope::split(rest).ok_or_else(|| {
            RpcError::new(Code::InvalidArgument, "protocol error: incomplete envelope")
        })?;
        messages.push(unary_message(payload)?);
        rest = tail;
    }
    Ok(messages)
}

/// A unary answer.
pub(crate) fn unary_response(result: RpcResult) -> Response<Body> {
    match result {
        Ok(message) => body::json(StatusCode::OK, &message),
        Err(error) => body::json(error.code.http_status(), &error.to_json()),
    }
}

/// `415 Unsupported Media Type`, connect-go's answer to a content type it does not serve.
pub(crate) fn unsupported_media_type() -> Response<Body> {
    body::empty(StatusCode::UNSUPPORTED_MEDIA_TYPE)
}

/// A streamed answer that ended before its first message (connect-go answers `200` and puts
/// the error in the end-stream envelope).
pub(crate) fn stream_failed(error: &RpcError) -> Response<Body> {
    let end = envelope::encode(
        envelope::END_STREAM,
        json!({ "error": error.to_json() }).to_string().as_bytes(),
    );
    body::response(StatusCode::OK, "application/connect+json", end)
}

/// A streamed answer and the writer feeding it.
pub(crate) fn stream_response() -> (StreamWriter, Response<Body>) {
    let (tx, body) = body::channel();
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/connect+json"),
    );
    (StreamWriter { tx }, resp)
}

/// The writing end of a streamed answer.
pub(crate) struct StreamWriter {
    tx: ChunkSender,
}

impl StreamWriter {
    /// Sends one message; `false` once the client is gone.
    pub(crate) async fn send(&self, message: &Value) -> bool {
        self.tx
            .send(Ok(envelope::encode(0, message.to_string().as_bytes())))
            .await
            .is_ok()
    }

    /// Ends the stream, with an error or without.
    pub(crate) async fn end(self, error: Option<RpcError>) {
        let trailer = match error {
            Some(error) => json!({ "error": error.to_json() }),
            None => json!({}),
        };
        let _ = self
            .tx
            .send(Ok(envelope::encode(
                envelope::END_STREAM,
                trailer.to_string().as_bytes(),
            )))
            .await;
    }

    /// Cuts the stream off without an end-stream envelope, as a dropped connection does.
    pub(crate) async fn abort(self) {
        let _ = self
            .tx
            .send(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "sandbox connection dropped",
            )))
            .await;
    }

    /// Resolves when the client has gone.
    pub(crate) async fn closed(&self) {
        self.tx.closed().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_round_trip() {
        let one = envelope::encode(0, br#"{"a":1}"#);
        let two = envelope::encode(envelope::END_STREAM, b"{}");
        let mut both = one.to_vec();
        both.extend_from_slice(&two);
        let (flags, payload, rest) = envelope::split(&both).unwrap();
        assert_eq!((flags, payload), (0, &br#"{"a":1}"#[..]));
        let (flags, payload, rest) = envelope::split(rest).unwrap();
        assert_eq!((flags, payload, rest.len()), (2, &b"{}"[..], 0));
        assert!(envelope::split(&both[..3]).is_none());
        assert_eq!(stream_messages(&one).unwrap(), vec![json!({"a": 1})]);
    }
}
