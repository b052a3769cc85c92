//! The agent side of the kernel API: signed requests, lease headers, retries, error mapping.

pub(crate) mod api;
mod base_url;
mod exchange;
pub(crate) mod explain;
mod floats;
mod lease;
mod retry;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode};

pub(crate) use self::base_url::{BaseUrl, encode_segment};
pub(crate) use self::exchange::{Exchange, Pace, network_error};
pub(crate) use self::lease::Lease;
pub(crate) use self::retry::Replayable;
use crate::Secret;
use crate::error::{Error, ErrorKind, Result};
use crate::rt::Runtime;
use crate::signing::{RequestSignature, SigningKey};
use crate::transport::SharedTransport;
use crate::wire::ErrorEnvelope;

/// Signs and sends agent requests to the kernel.
#[derive(Clone, Debug)]
pub(crate) struct KernelClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    base: BaseUrl,
    /// `Rebuno-Agent-Id`, parsed once (every request carries it); `None` when the id is no
    /// valid header value, which fails each request with a config error.
    agent_id: Option<HeaderValue>,
    key: SigningKey,
    exchange: Exchange,
}

/// One request before signing.
struct Call<'a> {
    method: Method,
    path: &'a str,
    body: Bytes,
    lease: Option<&'a Lease>,
    replayable: Replayable,
    /// Retries and per-try timeout other than the exchange's (a lease renewal's).
    pace: Option<Pace>,
}

impl KernelClient {
    pub(crate) fn new(
        base: BaseUrl,
        agent_id: String,
        secret: Secret,
        transport: SharedTransport,
        runtime: Runtime,
        timeout: Duration,
    ) -> Self {
        let exchange = Exchange::new(transport, runtime, timeout);
        Self {
            inner: Arc::new(Inner {
                base,
                agent_id: HeaderValue::from_str(&agent_id).ok(),
                key: SigningKey::new(&secret),
                exchange,
            }),
        }
    }

    /// The kernel's URL as configured, for log lines.
    pub(crate) fn url(&self) -> String {
        self.inner.base.as_string()
    }

    /// The kernel's URL and the exchange requests go through, for a client of the same kernel.
    pub(crate) fn connection(&self) -> (BaseUrl, Exchange) {
        (self.inner.base.clone(), self.inner.exchange.clone())
    }

    pub(crate) fn runtime(&self) -> &Runtime {
        &self.inner.exchange.runtime
    }

    /// Sends `call`, retrying with backoff while the kernel is unreachable or unavailable.
    async fn send(&self, call: Call<'_>) -> Result<http::Response<Bytes>> {
        // Boxed so the futures of handlers and tools that await kernel calls stay small: an
        // idle in-flight execution holds its handler's future.
        let exchange = &self.inner.exchange;
        let pace = call.pace.unwrap_or_else(|| exchange.pace());
        Box::pin(exchange.send_paced(&pace, call.replayable, || self.build(&call))).await
    }

    /// Builds and signs the request afresh (a retry gets a new timestamp).
    fn build(&self, call: &Call<'_>) -> Result<http::Request<Bytes>> {
        let inner = &self.inner;
        let target = inner.base.target(call.path);
        let timestamp = inner.exchange.runtime.unix_seconds().to_string();
        let (dispatch_id, attempt) = call.lease.map_or((String::new(), String::new()), |l| {
            (l.dispatch_id.clone(), l.attempt.to_string())
        });
        let signature = RequestSignature {
            method: call.method.as_str(),
            target: &target,
            timestamp: &timestamp,
            dispatch_id: &dispatch_id,
            attempt: &attempt,
        }
        .sign_keyed(&inner.key, &call.body);
        let mut builder = http::Request::builder()
            .method(call.method.clone())
            .uri(inner.base.uri(&target))
            .header(http::header::CONTENT_TYPE, "application/json")
            .header("Rebuno-Agent-Id", agent_id(inner)?)
            .header("Rebuno-Timestamp", timestamp)
            .header("Rebuno-Signature", signature);
        if call.lease.is_some() {
            builder = builder
                .header("Rebuno-Dispatch-Id", header(&dispatch_id)?)
                .header("Rebuno-Dispatch-Attempt", attempt);
        }
        builder
            .body(call.body.clone())
            .map_err(|e| Error::new(ErrorKind::Config, "invalid kernel request").with_source(e))
    }
}

fn agent_id(inner: &Inner) -> Result<HeaderValue> {
    inner.agent_id.clone().ok_or_else(|| {
        Error::new(
            ErrorKind::Config,
            "the agent id is not a valid HTTP header value",
        )
    })
}

fn header(value: &str) -> Result<HeaderValue> {
    HeaderValue::from_str(value).map_err(|e| {
        Error::new(ErrorKind::Config, "value is not a valid HTTP header").with_source(e)
    })
}

/// Maps a kernel error response to an [`Error`] by its envelope `code` (PROTOCOL.md §4.2).
pub(crate) fn error_from_response(status: StatusCode, body: &[u8]) -> Error {
    let envelope: Option<ErrorEnvelope> = serde_json::from_slice(body).ok();
    let (code, message) = match envelope {
        Some(e) if !e.code.is_empty() => (e.code, e.message),
        _ => (
            "internal_error".to_owned(),
            String::from_utf8_lossy(body).into_owned(),
        ),
    };
    let message = if message.is_empty() {
        format!("kernel answered {status}")
    } else {
        message
    };
    let kind = match code.as_str() {
        "execution_terminal" => ErrorKind::Terminated,
        "lease_superseded" => ErrorKind::LeaseSuperseded,
        "unauthorized" => ErrorKind::Unauthorized,
        "policy_denied" => ErrorKind::Policy,
        _ => ErrorKind::Api,
    };
    let error = Error::new(kind, message)
        .with_status(status)
        .with_code(code);
    if kind == ErrorKind::Policy {
        error.with_reason("policy_denied")
    } else {
        error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_map_by_code_not_status() {
        let superseded = error_from_response(
            StatusCode::CONFLICT,
            br#"{"code":"lease_superseded","message":"dispatch lease superseded"}"#,
        );
        assert_eq!(superseded.kind(), ErrorKind::LeaseSuperseded);
        let terminal = error_from_response(
            StatusCode::CONFLICT,
            br#"{"code":"execution_terminal","message":"x"}"#,
        );
        assert_eq!(terminal.kind(), ErrorKind::Terminated);
        let conflict = error_from_response(
            StatusCode::CONFLICT,
            br#"{"code":"conflict","message":"busy"}"#,
        );
        assert_eq!(
            (
                conflict.kind(),
                conflict.code(),
                conflict.to_string().as_str()
            ),
            (ErrorKind::Api, Some("conflict"), "busy")
        );
        let html = error_from_response(StatusCode::BAD_GATEWAY, b"<html>bad gateway</html>");
        assert_eq!(
            (html.kind(), html.code()),
            (ErrorKind::Api, Some("internal_error"))
        );
        assert!(html.is_retryable());
    }
}
