//! The request capture: one JSON object per request (kept in memory, and appended to the
//! capture file as one line when there is one) for the spec check (`validate.py`).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use http::request::Parts;
use http::{HeaderMap, StatusCode, header};
use serde_json::{Map, Value, json};

use crate::connect::envelope;
use crate::envd::multipart;

/// Headers worth recording (besides `content-type`, recorded on its own), secrets redacted.
const KEPT: &[&str] = &[
    "e2b-sandbox-id",
    "e2b-sandbox-port",
    "connect-protocol-version",
    "connect-timeout-ms",
    "keepalive-ping-interval",
    "idempotency-key",
    "content-encoding",
    "accept-encoding",
    "user-agent",
];
const SECRET: &[&str] = &["x-api-key", "x-access-token", "authorization"];
const REDACTED: &str = "<redacted>";

/// Where a request went: the REST API or a sandbox's envd.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Target<'a> {
    Api,
    Envd(&'a str),
}

/// The capture of every request served.
pub(crate) struct Capture {
    inner: Mutex<Inner>,
}

struct Inner {
    file: Option<File>,
    requests: Vec<Value>,
}

impl Capture {
    pub(crate) fn open(path: Option<&Path>) -> io::Result<Self> {
        let file = match path {
            Some(path) => Some(OpenOptions::new().create(true).append(true).open(path)?),
            None => None,
        };
        Ok(Self {
            inner: Mutex::new(Inner {
                file,
                requests: Vec::new(),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn requests(&self) -> Vec<Value> {
        self.lock().requests.clone()
    }

    /// Records one request and the status it was answered with.
    pub(crate) fn record(
        &self,
        parts: &Parts,
        body: &[u8],
        target: Target<'_>,
        status: StatusCode,
    ) {
        let mut entry = describe(parts, body, target);
        entry.insert("status".to_owned(), json!(status.as_u16()));
        let mut inner = self.lock();
        entry.insert("seq".to_owned(), json!(inner.requests.len() + 1));
        let line = Value::Object(entry);
        if let Some(file) = inner.file.as_mut() {
            // The capture is a test aid: a failed write must not fail the request.
            let _ = writeln!(file, "{line}").and_then(|()| file.flush());
        }
        inner.requests.push(line);
    }
}

fn describe(parts: &Parts, body: &[u8], target: Target<'_>) -> Map<String, Value> {
    let content_type = header_str(&parts.headers, header::CONTENT_TYPE.as_str());
    let (kind, decoded) = decode_body(content_type.as_deref(), &parts.headers, body);
    let mut entry = Map::new();
    let (target, sandbox) = match target {
        Target::Api => ("api", Value::Null),
        Target::Envd(id) => ("envd", json!(id)),
    };
    entry.insert("target".to_owned(), json!(target));
    entry.insert("sandbox_id".to_owned(), sandbox);
    entry.insert("method".to_owned(), json!(parts.method.as_str()));
    entry.insert("path".to_owned(), json!(parts.uri.path()));
    entry.insert("query".to_owned(), json!(parts.uri.query().unwrap_or("")));
    entry.insert("content_type".to_owned(), json!(content_type));
    entry.insert(
        "headers".to_owned(),
        Value::Object(kept_headers(&parts.headers)),
    );
    entry.insert("body_kind".to_owned(), json!(kind));
    entry.insert("body".to_owned(), decoded);
    entry
}

fn header_str(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn kept_headers(headers: &HeaderMap) -> Map<String, Value> {
    let mut kept = Map::new();
    for (name, value) in headers {
        let name = name.as_str();
        let value = if SECRET.contains(&name) {
            REDACTED.to_owned()
        } else if KEPT.contains(&name) || name.starts_with("x-metadata-") {
            String::from_utf8_lossy(value.as_bytes()).into_owned()
        } else {
            continue;
        };
        kept.insert(name.to_owned(), json!(value));
    }
    kept
}

fn decode_body(
    content_type: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> (&'static str, Value) {
    if body.is_empty() {
        return ("empty", Value::Null);
    }
    let media = content_type
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let encoded = headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|v| v.as_bytes() != b"identity");
    if encoded {
        return ("bytes", json!({ "size": body.len() }));
    }
    if media == "application/connect+json" {
        return ("connect_envelopes", decode_envelopes(body));
    }
    if media == "application/json" || media.ends_with("+json") {
        return match serde_json::from_slice(body) {
            Ok(value) => ("json", value),
            Err(_) => ("invalid_json", json!(String::from_utf8_lossy(body))),
        };
    }
    if media.starts_with("multipart/") {
        let parts = content_type
            .and_then(multipart::boundary)
            .map(|b| multipart::parse(body, &b));
        return match parts {
            Some(Ok(parts)) => (
                "multipart",
                json!({ "parts": parts.iter().map(multipart::Part::summary).collect::<Vec<_>>() }),
            ),
            _ => ("invalid_multipart", json!({ "size": body.len() })),
        };
    }
    ("bytes", json!({ "size": body.len() }))
}

fn decode_envelopes(body: &[u8]) -> Value {
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        match envelope::split(rest) {
            Some((flags, payload, tail)) => {
                let message = serde_json::from_slice(payload)
                    .unwrap_or_else(|_| json!(String::from_utf8_lossy(payload)));
                out.push(json!({ "flags": flags, "message": message }));
                rest = tail;
            }
            None => {
                out.push(json!({ "flags": null, "invalid": String::from_utf8_lossy(rest) }));
                break;
            }
        }
    }
    Value::Array(out)
}
