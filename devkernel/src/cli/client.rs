//! The HTTP client the terminal commands share: base URL, optional bearer token, JSON in
//! and out, the error envelope mapped to [`CliError::Api`].

use std::time::Duration;

use serde_json::Value;

use super::CliError;

/// Client timeout, as the SDKs use.
const TIMEOUT: Duration = Duration::from_secs(35);

/// Where the kernel is and how to authenticate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    /// Base URL, e.g. `http://127.0.0.1:8080`.
    pub url: String,
    /// Bearer token (bootstrap token or API key), if any.
    pub token: Option<String>,
}

/// A connected client.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    /// A client for `connection`.
    pub(crate) fn new(connection: &Connection) -> Result<Self, CliError> {
        let http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .build()
            .map_err(|source| CliError::Transport {
                url: connection.url.clone(),
                source,
            })?;
        Ok(Self {
            base: connection.url.trim_end_matches('/').to_owned(),
            token: connection.token.clone().filter(|t| !t.is_empty()),
            http,
        })
    }

    /// The kernel's base URL, without a trailing `/`.
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// The SDK's client for the same kernel and token.
    pub(crate) fn sdk(&self) -> Result<rebuno::client::Client, CliError> {
        let builder = rebuno::client::Client::builder().base_url(self.base.clone());
        let builder = match &self.token {
            Some(token) => builder.api_key(token.clone()),
            None => builder,
        };
        Ok(builder.build()?)
    }

    /// `GET path` → JSON.
    pub(crate) async fn get(&self, path: &str) -> Result<Value, CliError> {
        self.send(reqwest::Method::GET, path, None).await
    }

    /// `POST path` with an optional JSON body → JSON (`null` for `204`).
    pub(crate) async fn post(&self, path: &str, body: Option<&Value>) -> Result<Value, CliError> {
        self.send(reqwest::Method::POST, path, body).await
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, CliError> {
        let url = format!("{}{path}", self.base);
        let mut request = self.http.request(method, &url);
        if let Some(token) = &self.token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        if let Some(body) = body {
            request = request
                .header("Content-Type", "application/json")
                .body(body.to_string());
        }
        let response = request.send().await.map_err(|source| CliError::Http {
            url: self.base.clone(),
            source,
        })?;
        let status = response.status().as_u16();
        let text = response
            .text()
            .await
            .map_err(|source| CliError::Transport {
                url: url.clone(),
                source,
            })?;
        tracing::debug!(%url, status, "kernel answered");
        let json = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        if status >= 400 {
            return Err(api_error(status, &json));
        }
        Ok(json)
    }
}

/// `{"code", "message"}` (or a plain body) as an error; without either, the message is the
/// body as sent, else the status's reason.
fn api_error(status: u16, body: &Value) -> CliError {
    let field = |name: &str| body.get(name).and_then(Value::as_str).map(str::to_owned);
    let message = field("message")
        .or_else(|| body.as_str().map(|s| s.trim().to_owned()))
        .or_else(|| (!body.is_null()).then(|| body.to_string()))
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| reason(status));
    CliError::Api {
        status,
        code: field("code").unwrap_or_else(|| "error".to_owned()),
        message,
    }
}

/// The canonical reason of `status`, e.g. `Method Not Allowed`.
fn reason(status: u16) -> String {
    http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("no message")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn text(status: u16, body: &Value) -> String {
        api_error(status, body).to_string()
    }

    #[test]
    fn error_answers_name_code_and_message() {
        let envelope = json!({"code": "conflict", "message": "conflict: not running"});
        assert_eq!(
            text(409, &envelope),
            "kernel answered 409 conflict: conflict: not running"
        );
        assert_eq!(
            text(502, &json!("bad gateway\n")),
            "kernel answered 502 error: bad gateway"
        );
        assert_eq!(
            text(405, &Value::Null),
            "kernel answered 405 error: Method Not Allowed"
        );
        assert_eq!(
            text(500, &json!({"error": "boom"})),
            r#"kernel answered 500 error: {"error":"boom"}"#
        );
        let unauthorized = json!({"code": "unauthorized", "message": "unauthorized"});
        assert!(text(401, &unauthorized).ends_with("; set --token or REBUNO_API_KEY"));
    }
}
