//! One MCP session over streamable HTTP: the `initialize` handshake, requests with their
//! session and version headers, and a new session when the server forgets the old one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use serde_json::Value;

use super::answer::{Answer, Failure, read_answer};
use super::message::{self, SUPPORTED_VERSIONS};
use crate::transport::SharedTransport;

/// The header naming the session, set by the server on its `initialize` answer.
pub(super) const SESSION_HEADER: &str = "mcp-session-id";
/// The header carrying the negotiated version on every request after `initialize`.
pub(super) const VERSION_HEADER: &str = "mcp-protocol-version";
/// What the client accepts: a single JSON answer or an event stream.
const ACCEPT: &str = "application/json, text/event-stream";

/// What `initialize` settled: the session (if the server keeps one), the version, the server.
#[derive(Debug, Clone, Default)]
pub(super) struct Negotiated {
    pub(super) session_id: Option<HeaderValue>,
    pub(super) protocol_version: Option<String>,
    pub(super) server_info: Value,
}

/// Where and how to reach the server, and the session's state.
pub(super) struct Session {
    pub(super) endpoint: http::Uri,
    pub(super) transport: SharedTransport,
    /// Headers added to every request (credentials among them: never logged).
    pub(super) headers: HeaderMap,
    pub(super) timeout: Duration,
    pub(super) client_name: String,
    pub(super) client_version: String,
    pub(super) negotiated: Mutex<Negotiated>,
    pub(super) next_id: AtomicU64,
}

impl Session {
    /// What the last `initialize` settled.
    pub(super) fn negotiated(&self) -> Negotiated {
        self.negotiated
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The `initialize` handshake, then `notifications/initialized`.
    pub(super) async fn initialize(&self) -> Result<(), Failure> {
        let params = message::initialize_params(&self.client_name, &self.client_version);
        let fresh = Negotiated::default();
        let answer = self
            .exchange("initialize", Some(params), &fresh, None, None)
            .await?;
        let result = answer.result.map_err(Failure::Rpc)?;
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !SUPPORTED_VERSIONS.contains(&version) {
            return Err(Failure::Protocol(format!(
                "the server answered initialize with protocol version {version:?}; this client speaks {}",
                SUPPORTED_VERSIONS.join(", ")
            )));
        }
        let negotiated = Negotiated {
            session_id: answer.session_id,
            protocol_version: Some(version.to_owned()),
            server_info: result.get("serverInfo").cloned().unwrap_or(Value::Null),
        };
        self.notify("notifications/initialized", &negotiated)
            .await?;
        *self
            .negotiated
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = negotiated;
        Ok(())
    }

    /// Sends a request and returns its result. A `404` on a request that named a session
    /// means the server ended that session: the client initializes a new one (unless another
    /// request already did) and sends the request once more.
    ///
    /// `sent`, when given, is set to the id of the request on the wire (for a cancellation).
    pub(super) async fn request(
        &self,
        method: &str,
        params: Option<Value>,
        traceparent: Option<&str>,
        sent: Option<&AtomicU64>,
    ) -> Result<Value, Failure> {
        let used = self.negotiated();
        let answer = match self
            .exchange(method, params.clone(), &used, traceparent, sent)
            .await
        {
            Err(Failure::SessionExpired) => {
                self.renew(&used).await?;
                let renewed = self.negotiated();
                self.exchange(method, params, &renewed, traceparent, sent)
                    .await?
            }
            other => other?,
        };
        answer.result.map_err(Failure::Rpc)
    }

    /// Tells the server that request `id` is abandoned (`notifications/cancelled`).
    pub(super) async fn cancel(&self, id: u64, reason: &str) {
        let negotiated = self.negotiated();
        let message = message::cancelled(id, reason);
        if let Err(failure) = self.post_without_answer(&message, &negotiated).await {
            tracing::debug!(%failure, id, "cancelling an MCP request failed");
        }
    }

    /// A new session, unless the session `expired` was already replaced.
    async fn renew(&self, expired: &Negotiated) -> Result<(), Failure> {
        if self.negotiated().session_id == expired.session_id {
            tracing::info!(endpoint = %self.endpoint, "the MCP server ended the session: initializing a new one");
            self.initialize().await?;
        }
        Ok(())
    }

    /// Ends the session (`DELETE`); servers that do not allow it answer `405`, which is fine.
    pub(super) async fn end(&self) {
        let negotiated = self.negotiated();
        let Some(session_id) = negotiated.session_id.clone() else {
            return;
        };
        let Ok(mut request) = self.build(Method::DELETE, Bytes::new(), &negotiated) else {
            return;
        };
        request.headers_mut().insert(SESSION_HEADER, session_id);
        match self.transport.send(request, self.timeout).await {
            Ok(response) => tracing::debug!(status = %response.status(), "MCP session ended"),
            Err(error) => tracing::debug!(%error, "ending the MCP session failed"),
        }
    }

    /// One request and its answer, under `negotiated`.
    async fn exchange(
        &self,
        method: &str,
        params: Option<Value>,
        negotiated: &Negotiated,
        traceparent: Option<&str>,
        sent: Option<&AtomicU64>,
    ) -> Result<Answer, Failure> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if let Some(sent) = sent {
            sent.store(id, Ordering::Release);
        }
        let body = message::request(id, method, params);
        let mut request = self.build(Method::POST, Bytes::from(body.to_string()), negotiated)?;
        if let Some(value) = traceparent.and_then(|t| HeaderValue::from_str(t).ok()) {
            request.headers_mut().insert("traceparent", value);
        }
        let response = self
            .transport
            .send_streaming(request, self.timeout)
            .await
            .map_err(Failure::Transport)?;
        if response.status() == StatusCode::NOT_FOUND && negotiated.session_id.is_some() {
            return Err(Failure::SessionExpired);
        }
        read_answer(self, id, response, negotiated).await
    }

    /// Sends a notification (or an answer to the server): accepted with `202`, no body.
    pub(super) async fn post_without_answer(
        &self,
        message: &Value,
        negotiated: &Negotiated,
    ) -> Result<(), Failure> {
        let request = self.build(Method::POST, Bytes::from(message.to_string()), negotiated)?;
        let response = self
            .transport
            .send(request, self.timeout)
            .await
            .map_err(Failure::Transport)?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(Failure::Http {
                status: response.status(),
                body: super::answer::snippet(response.body()),
            })
        }
    }

    async fn notify(&self, method: &str, negotiated: &Negotiated) -> Result<(), Failure> {
        self.post_without_answer(&message::notification(method), negotiated)
            .await
    }

    /// A request to the endpoint with the session's headers.
    pub(super) fn build(
        &self,
        method: Method,
        body: Bytes,
        negotiated: &Negotiated,
    ) -> Result<http::Request<Bytes>, Failure> {
        let mut request = http::Request::builder()
            .method(method)
            .uri(self.endpoint.clone())
            .body(body)
            .map_err(|e| Failure::Protocol(format!("cannot build the request: {e}")))?;
        let headers = request.headers_mut();
        headers.insert(header::ACCEPT, HeaderValue::from_static(ACCEPT));
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(session_id) = &negotiated.session_id {
            headers.insert(SESSION_HEADER, session_id.clone());
        }
        if let Some(version) = negotiated
            .protocol_version
            .as_deref()
            .and_then(|v| HeaderValue::from_str(v).ok())
        {
            headers.insert(VERSION_HEADER, version);
        }
        for (name, value) in &self.headers {
            headers.insert(name.clone(), value.clone());
        }
        Ok(request)
    }
}
