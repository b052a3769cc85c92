//! The kernel the terminal commands talk to: the SDK's [`rebuno::client::Client`] for every
//! call, and its errors mapped to [`CliError`] (unreachable, the kernel's envelope, other).

use std::fmt;
use std::future::Future;
use std::time::Duration;

use rebuno::client::Client;
use rebuno::{ErrorKind, Secret};
use serde_json::Value;

use super::CliError;

/// How long a dev-only request ([`Remote::post_dev`]) may take.
const DEV_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the kernel is and how to authenticate.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Connection {
    /// Base URL, e.g. `http://127.0.0.1:8080`.
    pub url: String,
    /// Bearer token (bootstrap token or API key), if any.
    pub token: Option<String>,
}

impl fmt::Debug for Connection {
    /// Shows whether a token is set, never the token.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// A running kernel, reached over HTTP with the SDK's client.
#[derive(Debug, Clone)]
pub(crate) struct Remote {
    /// The base URL as given, without a trailing `/`, for messages.
    url: String,
    client: Client,
    /// The bearer token, for the dev-only routes the SDK's client does not know.
    token: Option<Secret>,
}

impl Remote {
    /// A client of the kernel `connection` names, with its token and nothing from the
    /// environment (the command line has resolved `REBUNO_URL` and `REBUNO_API_KEY` already).
    pub(crate) fn connect(connection: &Connection) -> Result<Self, CliError> {
        let url = connection.url.trim_end_matches('/').to_owned();
        let client = Client::builder()
            .base_url(url.clone())
            // An empty key is "no token", and keeps the builder from reading REBUNO_API_KEY.
            .api_key(connection.token.clone().unwrap_or_default())
            // A terminal command reports a failure at once rather than retrying for seconds.
            .max_attempts(1)
            .build()
            .map_err(CliError::Sdk)?;
        let token = connection.token.clone().map(Secret::new);
        Ok(Self { url, client, token })
    }

    /// A remote for an already built client (tests with a stand-in transport).
    #[cfg(test)]
    pub(crate) fn with_client(url: &str, client: Client) -> Self {
        Self {
            url: url.to_owned(),
            client,
            token: None,
        }
    }

    /// The kernel's base URL, without a trailing `/`.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The SDK client, to start a call with; finish it with [`call`](Self::call).
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// Awaits an SDK call and maps its error with [`error`](Self::error).
    pub(crate) async fn call<T>(
        &self,
        request: impl Future<Output = rebuno::Result<T>>,
    ) -> Result<T, CliError> {
        request.await.map_err(|error| self.error(error))
    }

    /// POSTs an empty body to a dev-only route of `rebuno-dev` (`/v0/dev/...`, which the SDK's
    /// client does not know) with the bearer token; its JSON answer, or the error mapped as
    /// [`error`](Self::error) maps the SDK's.
    pub(crate) async fn post_dev(&self, path: &str) -> Result<Value, CliError> {
        let url = format!("{}{path}", self.url);
        let mut request = reqwest::Client::new().post(&url).timeout(DEV_TIMEOUT);
        if let Some(token) = &self.token {
            let bearer = [b"Bearer ".as_slice(), token.expose()].concat();
            let mut value = http::HeaderValue::from_bytes(&bearer).map_err(|_| {
                CliError::Usage("the token has a character no HTTP header can carry".to_owned())
            })?;
            value.set_sensitive(true);
            request = request.header(http::header::AUTHORIZATION, value);
        }
        let unreachable = |source: reqwest::Error| CliError::Unreachable {
            url: self.url.clone(),
            source: Box::new(source.without_url()),
        };
        let response = request.send().await.map_err(unreachable)?;
        let status = response.status();
        let body = response.bytes().await.map_err(unreachable)?;
        match serde_json::from_slice::<Value>(&body) {
            Ok(answer) if status.is_success() => Ok(answer),
            answer => Err(dev_error(status, answer.ok(), &body, path)),
        }
    }

    /// An SDK error as the CLI reports it: [`CliError::Http`] when the kernel could not be
    /// reached, [`CliError::Api`] with the status, code and message of an answer, else
    /// [`CliError::Sdk`].
    pub(crate) fn error(&self, error: rebuno::Error) -> CliError {
        if error.kind() == ErrorKind::Network {
            return CliError::Http {
                url: self.url.clone(),
                source: error,
            };
        }
        let Some(status) = error.status() else {
            return CliError::Sdk(error);
        };
        let message = error.to_string().trim().to_owned();
        CliError::Api {
            status: status.as_u16(),
            code: error.code().unwrap_or("error").to_owned(),
            message: if message.is_empty() {
                status.canonical_reason().unwrap_or("no message").to_owned()
            } else {
                message
            },
        }
    }
}

/// A dev-only route's error answer as [`CliError::Api`]: its envelope's code and message; a
/// `404` without one is a kernel that does not serve the route (not `rebuno-dev`).
fn dev_error(
    status: http::StatusCode,
    envelope: Option<Value>,
    body: &[u8],
    path: &str,
) -> CliError {
    let field = |name: &str| {
        envelope
            .as_ref()
            .and_then(|answer| answer.get(name)?.as_str().map(str::to_owned))
    };
    let (code, message) = match (field("code"), field("message")) {
        (Some(code), Some(message)) => (code, message),
        _ if status == http::StatusCode::NOT_FOUND => (
            "not_found".to_owned(),
            format!(
                "no route POST {path}: this command needs a rebuno-dev kernel (the Go kernel \
                 has no such route; there, a run is delivered again when its lease expires)"
            ),
        ),
        _ if status.is_success() => (
            "unexpected_response".to_owned(),
            "the answer is not JSON".to_owned(),
        ),
        _ => {
            let text = String::from_utf8_lossy(body).trim().to_owned();
            let reason = status.canonical_reason().unwrap_or("no message");
            let message = if text.is_empty() {
                reason.to_owned()
            } else {
                text
            };
            ("internal_error".to_owned(), message)
        }
    };
    CliError::Api {
        status: status.as_u16(),
        code,
        message,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use rebuno::transport::{Transport, TransportError, TransportErrorKind, TransportFuture};

    use super::*;

    /// Answers every request with one status and body, or fails to connect (`status` 0).
    #[derive(Debug)]
    struct Canned(u16, &'static str);

    impl Transport for Canned {
        fn send(&self, _: http::Request<Bytes>, _: Duration) -> TransportFuture {
            let answer = if self.0 == 0 {
                let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
                Err(TransportError::new(TransportErrorKind::Connect, refused))
            } else {
                Ok(http::Response::builder()
                    .status(self.0)
                    .body(Bytes::from_static(self.1.as_bytes()))
                    .unwrap())
            };
            Box::pin(async move { answer })
        }
    }

    /// The CLI's error of `GET /v0/executions/x` answered `status` with `body`.
    async fn error(status: u16, body: &'static str) -> CliError {
        let client = Client::builder()
            .base_url("http://k:1")
            .max_attempts(1)
            .transport(Canned(status, body))
            .build()
            .unwrap();
        let remote = Remote::with_client("http://k:1", client);
        remote
            .call(remote.client().get("x"))
            .await
            .map(drop)
            .unwrap_err()
    }

    #[tokio::test]
    async fn error_answers_name_status_code_and_message() {
        let envelope = r#"{"code": "conflict", "message": "conflict: not running"}"#;
        assert_eq!(
            error(409, envelope).await.to_string(),
            "kernel answered 409 conflict: conflict: not running"
        );
        let unauthorized = r#"{"code": "unauthorized", "message": "unauthorized"}"#;
        let text = error(401, unauthorized).await.to_string();
        assert!(text.ends_with("; set --token or REBUNO_API_KEY"), "{text}");
        // Without an envelope, the SDK names the answer `internal_error` with its body.
        assert_eq!(
            error(502, "bad gateway\n").await.to_string(),
            "kernel answered 502 internal_error: bad gateway"
        );
        assert!(matches!(
            error(400, r#"{"code":"validation_error","message":"invalid id"}"#).await,
            CliError::Api { status: 400, .. }
        ));
    }

    #[tokio::test]
    async fn an_unreachable_kernel_and_an_unreadable_answer() {
        let refused = error(0, "").await;
        assert!(matches!(&refused, CliError::Http { url, .. } if url == "http://k:1"));
        assert!(
            refused
                .to_string()
                .starts_with("could not reach the kernel at http://k:1: ")
        );
        let unreadable = error(200, "not json").await;
        assert!(matches!(unreadable, CliError::Sdk(_)));
        assert!(
            unreadable
                .to_string()
                .starts_with("unexpected kernel response: expected ident"),
            "{unreadable}"
        );
    }

    #[test]
    fn dev_route_errors_name_the_kernel_that_lacks_the_route() {
        let path = "/v0/dev/executions/x/redeliver";
        let envelope = serde_json::json!({"code": "conflict", "message": "conflict: ended"});
        let error = dev_error(http::StatusCode::CONFLICT, Some(envelope), b"", path);
        assert_eq!(
            error.to_string(),
            "kernel answered 409 conflict: conflict: ended"
        );
        let go = dev_error(
            http::StatusCode::NOT_FOUND,
            None,
            b"404 page not found\n",
            path,
        );
        assert!(
            go.to_string().starts_with(
                "kernel answered 404 not_found: no route POST /v0/dev/executions/x/redeliver: \
                 this command needs a rebuno-dev kernel"
            ),
            "{go}"
        );
        let proxy = dev_error(http::StatusCode::BAD_GATEWAY, None, b" bad gateway ", path);
        assert_eq!(
            proxy.to_string(),
            "kernel answered 502 internal_error: bad gateway"
        );
    }

    #[test]
    fn the_token_stays_out_of_debug() {
        let connection = Connection {
            url: "http://k:1".into(),
            token: Some("rbk_secret".into()),
        };
        let shown = format!("{connection:?}");
        assert!(
            !shown.contains("rbk_secret") && shown.contains("<redacted>"),
            "{shown}"
        );
    }
}
