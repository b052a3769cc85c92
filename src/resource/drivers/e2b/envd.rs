//! The connection to one sandbox's envd: its URL, the headers every envd request carries, and
//! unary Connect calls.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode, header};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::api::SandboxInfo;
use super::config::ENVD_PORT;
use super::connect::ConnectError;
use super::error::{Call, E2bError};
use crate::Secret;
use crate::transport::SharedTransport;

/// `Authorization: Basic` for the sandbox's `user`, with no password (`base64("user:")`).
const LEGACY_AUTHORIZATION: &str = "Basic dXNlcjo=";
/// The first envd version with a default user: older ones need the user named on every call.
const DEFAULT_USER_SINCE: (u64, u64, u64) = (0, 4, 0);

/// One sandbox's envd, as the latest create or connect answer describes it.
pub(super) struct Envd {
    base: String,
    sandbox_id: String,
    access_token: Option<Secret>,
    /// envd older than 0.4.0: name the user on every call (as E2B's SDKs do).
    legacy_user: bool,
    transport: SharedTransport,
    timeout: Duration,
}

impl fmt::Debug for Envd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Envd")
            .field("url", &self.base)
            .field("sandbox_id", &self.sandbox_id)
            .field("access_token", &self.access_token.as_ref().map(|_| "set"))
            .finish_non_exhaustive()
    }
}

impl Envd {
    /// envd at `base` for the sandbox `info` describes.
    pub(super) fn new(
        base: String,
        info: SandboxInfo,
        transport: SharedTransport,
        timeout: Duration,
    ) -> Self {
        let legacy_user = info
            .envd_version
            .as_deref()
            .and_then(version)
            .is_some_and(|v| v < DEFAULT_USER_SINCE);
        Self {
            base,
            sandbox_id: info.sandbox_id,
            access_token: info.envd_access_token,
            legacy_user,
            transport,
            timeout,
        }
    }

    /// The sandbox this envd belongs to.
    pub(super) fn sandbox_id(&self) -> &str {
        &self.sandbox_id
    }

    /// envd's base URL.
    pub(super) fn url(&self) -> &str {
        &self.base
    }

    /// The transport requests go through.
    pub(super) fn transport(&self) -> &SharedTransport {
        &self.transport
    }

    /// The `username` query parameter `/files` needs, if any (`&`-prefixed).
    pub(super) fn user_query(&self) -> &'static str {
        if self.legacy_user {
            "&username=user"
        } else {
            ""
        }
    }

    /// A request to `path_and_query` with the headers every envd request carries: the
    /// sandbox's id and envd port (E2B's proxy routes by them when one URL serves every
    /// sandbox), and its access token when it has one.
    pub(super) fn request(
        &self,
        method: Method,
        path_and_query: &str,
    ) -> (String, http::request::Builder) {
        let url = format!("{}{path_and_query}", self.base);
        let mut request = http::Request::builder()
            .method(method)
            .uri(&url)
            .header("e2b-sandbox-id", &self.sandbox_id)
            .header("e2b-sandbox-port", ENVD_PORT.to_string());
        if let Some(token) = &self.access_token
            && let Ok(mut value) = HeaderValue::from_bytes(token.expose())
        {
            value.set_sensitive(true);
            request = request.header("x-access-token", value);
        }
        (url, request)
    }

    /// A Connect request to `rpc` (`"filesystem.Filesystem/ListDir"`), with the Connect
    /// headers but no `Content-Type`.
    pub(super) fn rpc_request(
        &self,
        rpc: &str,
        timeout: Duration,
    ) -> (String, http::request::Builder) {
        let (url, mut request) = self.request(Method::POST, &format!("/{rpc}"));
        request = request
            .header("connect-protocol-version", "1")
            .header("connect-timeout-ms", timeout.as_millis().max(1).to_string());
        if self.legacy_user {
            request = request.header(header::AUTHORIZATION, LEGACY_AUTHORIZATION);
        }
        (url, request)
    }

    /// Sends a finished request, bounded by the request timeout.
    pub(super) async fn send(
        &self,
        call: &Call,
        url: &str,
        request: Result<http::Request<Bytes>, http::Error>,
    ) -> Result<http::Response<Bytes>, E2bError> {
        let request =
            request.map_err(|e| E2bError::config(format!("invalid envd URL {url:?}: {e}")))?;
        tracing::debug!(call = %call.name, sandbox = %self.sandbox_id, "E2B envd request");
        self.transport
            .send(request, self.timeout)
            .await
            .map_err(|e| E2bError::transport(call.clone(), url, e))
    }

    /// A unary Connect call: `message` as JSON to `rpc`, its JSON answer.
    pub(super) async fn unary<Req: Serialize, Res: DeserializeOwned>(
        &self,
        call: &Call,
        rpc: &str,
        message: &Req,
    ) -> Result<Res, E2bError> {
        let body = serde_json::to_vec(message).map_err(|e| E2bError::protocol(call.clone(), e))?;
        let (url, request) = self.rpc_request(rpc, self.timeout);
        let request = request
            .header(header::CONTENT_TYPE, "application/json")
            .body(Bytes::from(body));
        let answer = self.send(call, &url, request).await?;
        let status = answer.status();
        if status != StatusCode::OK {
            return Err(match ConnectError::from_unary(answer.body()) {
                Some(error) => E2bError::connect(call.clone(), Some(status), error),
                None => E2bError::answer(call.clone(), status, answer.body()),
            });
        }
        serde_json::from_slice(answer.body()).map_err(|e| E2bError::protocol(call.clone(), e))
    }
}

/// `major.minor.patch` of an envd version (`"0.2.4"`, `"0.4.0-rc1"`).
fn version(text: &str) -> Option<(u64, u64, u64)> {
    let mut parts = text.trim_start_matches('v').split(['.', '-', '+']);
    let mut next = || parts.next().and_then(|p| p.parse::<u64>().ok());
    Some((next()?, next()?, next().unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_leniently() {
        assert_eq!(version("0.2.4"), Some((0, 2, 4)));
        assert_eq!(version("v0.4.0-rc1"), Some((0, 4, 0)));
        assert_eq!(version("1.2"), Some((1, 2, 0)));
        assert_eq!(version("nightly"), None);
        assert!(version("0.3.9").unwrap() < DEFAULT_USER_SINCE);
        assert!(version("0.10.0").unwrap() >= DEFAULT_USER_SINCE);
    }
}
