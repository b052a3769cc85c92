//! The E2B REST API calls the driver makes: create, connect, snapshot, pause and kill a
//! sandbox. Only endpoints of E2B's published OpenAPI spec.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode, header};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::encoding::percent_encode;
use super::error::{Call, E2bError};
use crate::Secret;
use crate::transport::SharedTransport;

/// The header that carries the API key.
const API_KEY: &str = "x-api-key";

/// A client of the E2B REST API.
#[derive(Clone)]
pub(super) struct Api {
    base: String,
    key: Secret,
    transport: SharedTransport,
    timeout: Duration,
}

/// A created or connected sandbox, as the API describes it (`Sandbox` in the spec).
#[derive(Deserialize)]
pub(super) struct SandboxInfo {
    #[serde(rename = "sandboxID")]
    pub(super) sandbox_id: String,
    #[serde(rename = "envdVersion", default)]
    pub(super) envd_version: Option<String>,
    /// Sent with every envd request when present (sandboxes created `secure`).
    #[serde(rename = "envdAccessToken", default)]
    pub(super) envd_access_token: Option<Secret>,
    /// Where the sandbox's traffic goes, when not the configured domain.
    #[serde(default)]
    pub(super) domain: Option<String>,
}

/// A snapshot just taken (`SnapshotInfo` in the spec).
#[derive(Deserialize)]
struct SnapshotInfo {
    #[serde(rename = "snapshotID")]
    snapshot_id: String,
}

impl Api {
    pub(super) fn new(
        base: String,
        key: Secret,
        transport: SharedTransport,
        timeout: Duration,
    ) -> Self {
        Self {
            base,
            key,
            transport,
            timeout,
        }
    }

    /// The transport requests go through.
    pub(super) fn transport(&self) -> &SharedTransport {
        &self.transport
    }

    /// `POST /sandboxes`: a new sandbox from `template` (a template or snapshot id), living
    /// `lifetime` seconds, its envd secured by an access token.
    pub(super) async fn create(
        &self,
        template: &str,
        lifetime: u32,
    ) -> Result<SandboxInfo, E2bError> {
        let call = Call::api("POST /sandboxes", None);
        let body = json!({ "templateID": template, "timeout": lifetime, "secure": true });
        let answer = self
            .send(&call, Method::POST, "/sandboxes".to_owned(), Some(&body))
            .await?;
        parse(call, answer)
    }

    /// `POST /sandboxes/{sandboxID}/connect`: the sandbox, resumed if it was paused, its life
    /// extended to `lifetime` seconds from now.
    pub(super) async fn connect(&self, id: &str, lifetime: u32) -> Result<SandboxInfo, E2bError> {
        let call = Call::api("POST /sandboxes/{sandboxID}/connect", Some(id));
        let path = format!("/sandboxes/{}/connect", percent_encode(id));
        let body = json!({ "timeout": lifetime });
        let answer = self.send(&call, Method::POST, path, Some(&body)).await?;
        parse(call, answer)
    }

    /// `POST /sandboxes/{sandboxID}/snapshots`: a persistent snapshot; returns its id, which
    /// creates sandboxes as a template id does.
    pub(super) async fn snapshot(&self, id: &str) -> Result<String, E2bError> {
        let call = Call::api("POST /sandboxes/{sandboxID}/snapshots", Some(id));
        let path = format!("/sandboxes/{}/snapshots", percent_encode(id));
        let answer = self
            .send(&call, Method::POST, path, Some(&json!({})))
            .await?;
        parse::<SnapshotInfo>(call, answer).map(|info| info.snapshot_id)
    }

    /// `POST /sandboxes/{sandboxID}/pause`: `false` when it was paused already (409) or is
    /// gone (404: killed, or past its lifetime; nothing to pause).
    pub(super) async fn pause(&self, id: &str) -> Result<bool, E2bError> {
        let call = Call::api("POST /sandboxes/{sandboxID}/pause", Some(id));
        let path = format!("/sandboxes/{}/pause", percent_encode(id));
        let answer = self.send(&call, Method::POST, path, None).await?;
        if matches!(
            answer.status(),
            StatusCode::CONFLICT | StatusCode::NOT_FOUND
        ) {
            tracing::debug!(sandbox = id, status = %answer.status(), "E2B sandbox not paused: already paused or gone");
            return Ok(false);
        }
        success(call, answer).map(|_| true)
    }

    /// `DELETE /sandboxes/{sandboxID}`: `false` when it was gone already (404).
    pub(super) async fn kill(&self, id: &str) -> Result<bool, E2bError> {
        let call = Call::api("DELETE /sandboxes/{sandboxID}", Some(id));
        let path = format!("/sandboxes/{}", percent_encode(id));
        let answer = self.send(&call, Method::DELETE, path, None).await?;
        if answer.status() == StatusCode::NOT_FOUND {
            return Ok(false);
        }
        success(call, answer).map(|_| true)
    }

    /// Sends one request with the API key; any answer is returned, whatever its status.
    async fn send(
        &self,
        call: &Call,
        method: Method,
        path: String,
        body: Option<&Value>,
    ) -> Result<http::Response<Bytes>, E2bError> {
        let url = format!("{}{path}", self.base);
        let mut key = HeaderValue::from_bytes(self.key.expose())
            .map_err(|_| E2bError::config("the E2B API key is not a valid HTTP header value"))?;
        key.set_sensitive(true);
        let mut request = http::Request::builder()
            .method(method)
            .uri(&url)
            .header(API_KEY, key);
        let body = match body {
            Some(body) => {
                request = request.header(header::CONTENT_TYPE, "application/json");
                Bytes::from(body.to_string())
            }
            None => Bytes::new(),
        };
        let request = request
            .body(body)
            .map_err(|e| E2bError::config(format!("invalid E2B API URL {url:?}: {e}")))?;
        tracing::debug!(call = %call.name, sandbox = ?call.sandbox_id, "E2B API request");
        self.transport
            .send(request, self.timeout)
            .await
            .map_err(|e| E2bError::transport(call.clone(), &url, e))
    }
}

/// The body of a successful answer, or the error the answer carries.
fn success(call: Call, answer: http::Response<Bytes>) -> Result<Bytes, E2bError> {
    let status = answer.status();
    if status.is_success() {
        Ok(answer.into_body())
    } else {
        Err(E2bError::answer(call, status, answer.body()))
    }
}

/// The JSON body of a successful answer.
fn parse<T: DeserializeOwned>(call: Call, answer: http::Response<Bytes>) -> Result<T, E2bError> {
    let body = success(call.clone(), answer)?;
    serde_json::from_slice(&body).map_err(|e| E2bError::protocol(call, e))
}
