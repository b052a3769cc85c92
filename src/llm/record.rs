//! The recorded form of a provider response, and the responses rebuilt from it.
//!
//! A record is `{"status", "headers": {"content-type"}, "body"}`, the shape the Python SDK
//! writes, so a call recorded by either SDK replays in the other. Only the status, the recorded
//! headers and the body are rebuilt: a stale `content-length` or `content-encoding` never
//! reaches the consumer.

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};
use serde_json::{Map, Value, json};

use super::body::LlmBody;
use crate::refusal::{REFUSAL_TYPE, Refusal, RefusalKind};

/// How much of a replayed stream one chunk carries.
const REPLAY_CHUNK: usize = 4096;

/// A provider response as the kernel stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Record {
    pub(super) status: u16,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: String,
}

impl Record {
    /// A live response's record: its status, its content-type (JSON when it has none) and body.
    pub(super) fn new(status: u16, content_type: &str, body: String) -> Self {
        Self {
            status,
            headers: vec![("content-type".to_owned(), content_type.to_owned())],
            body,
        }
    }

    /// The JSON the step's result holds.
    pub(super) fn to_value(&self) -> Value {
        let headers: Map<String, Value> = self
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        json!({ "status": self.status, "headers": headers, "body": self.body })
    }

    /// Reads a recorded result. A result that is not an object is served as JSON with status
    /// 200; a body that is not a string is served as its JSON text.
    pub(super) fn from_value(recorded: &Value) -> Self {
        let Value::Object(record) = recorded else {
            return Self::new(200, "application/json", python_dumps(recorded));
        };
        let status = record
            .get("status")
            .and_then(|s| s.as_u64().or_else(|| s.as_str()?.trim().parse().ok()))
            .and_then(|s| u16::try_from(s).ok())
            .unwrap_or(200);
        let headers = match record.get("headers") {
            Some(Value::Object(headers)) if !headers.is_empty() => headers
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect(),
            _ => vec![("content-type".to_owned(), "application/json".to_owned())],
        };
        let body = match record.get("body") {
            None => String::new(),
            Some(Value::String(body)) => body.clone(),
            Some(other) => python_dumps(other),
        };
        Self {
            status,
            headers,
            body,
        }
    }

    /// The recorded content-type, if any.
    pub(super) fn content_type(&self) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
            .map(|(_, v)| v.as_str())
    }

    /// The response this record stands for; `streamed` serves the body in 4096-byte chunks, so
    /// a replayed stream is still iterated as one.
    pub(super) fn into_response(self, streamed: bool) -> http::Response<LlmBody> {
        let body = Bytes::from(self.body);
        let body = if streamed {
            LlmBody::chunked(body, REPLAY_CHUNK)
        } else {
            LlmBody::full(body)
        };
        let mut response = http::Response::new(body);
        *response.status_mut() = StatusCode::from_u16(self.status).unwrap_or(StatusCode::OK);
        for (name, value) in &self.headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::try_from(name.as_str()),
                HeaderValue::try_from(value.as_str()),
            ) {
                response.headers_mut().insert(name, value);
            }
        }
        response
    }
}

/// JSON text as Python's `json.dumps` writes it (`, ` and `: ` separators, non-ASCII escaped),
/// so a result that is not an envelope is served with the bytes the Python SDK serves.
fn python_dumps(value: &Value) -> String {
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, PythonFormatter);
    match serde::Serialize::serialize(value, &mut serializer) {
        Ok(()) => String::from_utf8(out).unwrap_or_else(|_| value.to_string()),
        Err(_) => value.to_string(),
    }
}

/// `json.dumps` defaults: `ensure_ascii=True`, `separators=(", ", ": ")`.
struct PythonFormatter;

impl serde_json::ser::Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            writer.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            writer.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        writer.write_all(b": ")
    }

    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        for c in fragment.chars() {
            if c.is_ascii() {
                writer.write_all(&[c as u8])?;
            } else {
                for unit in c.encode_utf16(&mut [0; 2]) {
                    write!(writer, "\\u{unit:04x}")?;
                }
            }
        }
        Ok(())
    }
}

/// Whether a content-type names server-sent events (parameters and case ignored).
pub(super) fn is_event_stream(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("text/event-stream"))
}

/// The provider-style error answer for a refusal: 403, 429 for rate limits, 409 for a
/// superseded lease, with `{"error": {"type": "rebuno_refusal", "message": …}}`.
pub(super) fn refusal_response(refusal: &Refusal) -> http::Response<LlmBody> {
    let status = match refusal.kind {
        RefusalKind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        RefusalKind::LeaseSuperseded => StatusCode::CONFLICT,
        _ => StatusCode::FORBIDDEN,
    };
    let body = json!({ "error": { "type": REFUSAL_TYPE, "message": refusal.message() } });
    let mut response = http::Response::new(LlmBody::full(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // The raw path (`DurableLlm::send`, `llm::fetch`) turns this back into an error.
    response.extensions_mut().insert(refusal.clone());
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_through_its_json() {
        let record = Record::new(
            201,
            "text/event-stream; charset=utf-8",
            "data: x\n\n".into(),
        );
        let value = record.to_value();
        assert_eq!(
            value,
            json!({"status": 201, "headers": {"content-type": "text/event-stream; charset=utf-8"}, "body": "data: x\n\n"})
        );
        assert_eq!(Record::from_value(&value), record);
    }

    #[test]
    fn results_that_are_not_envelopes_are_served_as_json() {
        // The bytes Python's json.dumps gives for the same values.
        let record = Record::from_value(&json!([1, "é😀", {"k": null}]));
        let python = r#"[1, "\u00e9\ud83d\ude00", {"k": null}]"#;
        assert_eq!((record.status, record.body.as_str()), (200, python));
        assert_eq!(record.content_type(), Some("application/json"));
        let record = Record::from_value(&json!({"status": "201", "body": {"a": [1, 2]}}));
        assert_eq!(
            (record.status, record.body.as_str()),
            (201, r#"{"a": [1, 2]}"#)
        );
    }

    #[test]
    fn event_streams_are_recognised_with_parameters_and_any_case() {
        assert!(is_event_stream("Text/Event-Stream; charset=utf-8"));
        assert!(!is_event_stream("application/json"));
    }

    #[test]
    fn refusals_answer_with_the_python_statuses_and_body() {
        let cases = [
            (
                RefusalKind::Denied,
                Some("no_gpt"),
                403,
                "rebuno_refusal: denied reason=no_gpt",
            ),
            (
                RefusalKind::RateLimited,
                None,
                429,
                "rebuno_refusal: rate_limited reason=rate_limit_exceeded",
            ),
            (RefusalKind::Blocked, None, 403, "rebuno_refusal: blocked"),
            (
                RefusalKind::Terminated,
                None,
                403,
                "rebuno_refusal: execution_terminal",
            ),
            (
                RefusalKind::LeaseSuperseded,
                None,
                409,
                "rebuno_refusal: lease_superseded",
            ),
        ];
        for (kind, reason, status, message) in cases {
            let response = refusal_response(&Refusal::new(kind, reason.map(str::to_owned)));
            assert_eq!(response.status().as_u16(), status);
            let body = response.into_body().try_into_full().unwrap_or_default();
            let body: Value = serde_json::from_slice(&body).unwrap_or_default();
            assert_eq!(
                body,
                json!({"error": {"type": "rebuno_refusal", "message": message}})
            );
        }
    }
}
