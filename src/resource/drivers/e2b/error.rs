//! [`E2bError`]: what went wrong talking to E2B, said so that the reader knows which call,
//! which sandbox, and what to check.

use std::fmt::{self, Write as _};
use std::time::Duration;

use http::StatusCode;

use super::connect::ConnectError;
use crate::error::{BoxError, error_chain};
use crate::transport::{TransportError, TransportErrorKind};

/// The longest server message kept (a proxy may answer with a whole HTML page).
const MAX_SERVER_MESSAGE: usize = 500;

/// What kind of failure an [`E2bError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum E2bErrorKind {
    /// The driver is not configured (no API key, an unusable URL, no HTTP client).
    Config,
    /// The E2B API refused the API key, or envd the sandbox's access token (401).
    Unauthorized,
    /// What the call names does not exist (404, or Connect `not_found`): a sandbox that was
    /// killed or expired, a file, a template.
    NotFound,
    /// Any other error answer from the E2B API or from envd.
    Api,
    /// No answer: the URL could not be reached, or the connection failed mid-request.
    Unreachable,
    /// No answer in time, or a command ran past its timeout.
    Timeout,
    /// An answer this driver does not understand.
    Protocol,
}

/// Which E2B service a call went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Service {
    /// The REST API (`api.<domain>`), authenticated by the API key.
    Api,
    /// envd inside the sandbox, authenticated by the sandbox's access token.
    Envd,
}

/// Which call failed: its name (`"POST /sandboxes"`, `"files.write /home/user/a.txt"`), the
/// sandbox it concerned, and the service it went to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Call {
    pub(super) name: String,
    pub(super) sandbox_id: Option<String>,
    pub(super) service: Service,
}

impl Call {
    /// A call to the REST API.
    pub(super) fn api(name: impl Into<String>, sandbox_id: Option<&str>) -> Self {
        Self {
            name: name.into(),
            sandbox_id: sandbox_id.map(str::to_owned),
            service: Service::Api,
        }
    }

    /// A call to a sandbox's envd.
    pub(super) fn envd(name: impl Into<String>, sandbox_id: &str) -> Self {
        Self {
            name: name.into(),
            sandbox_id: Some(sandbox_id.to_owned()),
            service: Service::Envd,
        }
    }
}

/// A failed E2B call: which call (`"POST /sandboxes"`, `"files.write /home/user/a.txt"`,
/// `"commands.run \"cargo test\""`), which sandbox, the HTTP status and the server's message
/// when there was an answer, and what to check.
///
/// Match on [`kind`](Self::kind); the message text is not stable. No credential (API key,
/// access token) ever appears in it, in `Debug`, or in logs.
///
/// ```
/// # fn demo(error: rebuno::resource::drivers::E2bError) {
/// use rebuno::resource::drivers::E2bErrorKind;
///
/// if error.kind() == E2bErrorKind::NotFound {
///     eprintln!("gone: {error}");
/// }
/// # }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct E2bError {
    inner: Box<Inner>,
}

#[derive(Debug)]
struct Inner {
    kind: E2bErrorKind,
    call: Call,
    status: Option<StatusCode>,
    server_message: Option<String>,
    code: Option<String>,
    message: String,
    source: Option<BoxError>,
}

impl E2bError {
    fn new(kind: E2bErrorKind, call: Call, message: String) -> Self {
        Self {
            inner: Box::new(Inner {
                kind,
                call,
                status: None,
                server_message: None,
                code: None,
                message,
                source: None,
            }),
        }
    }

    /// Whether envd's proxy said the sandbox is not running (502): a paused sandbox resumes
    /// on a reconnect.
    pub(super) fn not_running(&self) -> bool {
        self.inner.call.service == Service::Envd
            && self.inner.status == Some(StatusCode::BAD_GATEWAY)
    }

    /// The same error with `note` (what to check) after its message.
    pub(super) fn noting(mut self, note: &str) -> Self {
        self.inner.message = format!("{}; {note}", self.inner.message);
        self
    }

    /// A configuration problem, found before any request.
    pub(super) fn config(message: impl Into<String>) -> Self {
        let call = Call::api("E2bSandbox", None);
        Self::new(E2bErrorKind::Config, call, message.into())
    }

    /// `E2B_API_KEY` is not set.
    pub(super) fn missing_key() -> Self {
        Self::config(
            "E2B_API_KEY is not set: set it to your E2B API key (https://e2b.dev/dashboard), or \
             pass the key with E2bSandbox::new (on Cloudflare Workers, from a secret)",
        )
    }

    /// A non-success answer with `body`.
    pub(super) fn answer(call: Call, status: StatusCode, body: &[u8]) -> Self {
        let server_message = server_message(body);
        let kind = match status {
            StatusCode::UNAUTHORIZED => E2bErrorKind::Unauthorized,
            StatusCode::NOT_FOUND => E2bErrorKind::NotFound,
            // The sandbox proxy's answer for a sandbox that is not running.
            StatusCode::BAD_GATEWAY if call.service == Service::Envd => E2bErrorKind::NotFound,
            StatusCode::REQUEST_TIMEOUT | StatusCode::GATEWAY_TIMEOUT => E2bErrorKind::Timeout,
            _ => E2bErrorKind::Api,
        };
        let message = describe(
            kind,
            call.service,
            status.to_string(),
            server_message.as_deref(),
        );
        let mut error = Self::new(kind, call, message);
        error.inner.status = Some(status);
        error.inner.server_message = server_message;
        if kind != E2bErrorKind::NotFound {
            // So `rebuno::is_transient` (and the retry policies of the tools that call the
            // driver) count a 429, 408 or 5xx from E2B as worth another try.
            let header = http::HeaderMap::new();
            error.inner.source = Some(Box::new(crate::retry::HttpStatus::of(status, &header, 0)));
        }
        error
    }

    /// A Connect error (a unary call's error answer, or a stream's end-of-stream error).
    pub(super) fn connect(call: Call, status: Option<StatusCode>, error: ConnectError) -> Self {
        let kind = match error.code.as_str() {
            "unauthenticated" => E2bErrorKind::Unauthorized,
            "not_found" => E2bErrorKind::NotFound,
            "deadline_exceeded" => E2bErrorKind::Timeout,
            "unavailable" => E2bErrorKind::Unreachable,
            _ => E2bErrorKind::Api,
        };
        let server_message = Some(error.message).filter(|m| !m.is_empty());
        let head = match status {
            Some(status) => format!("{} ({status})", error.code),
            None => error.code.clone(),
        };
        let message = describe(kind, call.service, head, server_message.as_deref());
        let code = Some(error.code);
        let mut error = Self::new(kind, call, message);
        error.inner.status = status;
        error.inner.server_message = server_message;
        error.inner.code = code;
        error
    }

    /// No answer from `url`.
    pub(super) fn transport(call: Call, url: &str, error: TransportError) -> Self {
        let kind = match error.kind() {
            TransportErrorKind::Timeout => E2bErrorKind::Timeout,
            _ => E2bErrorKind::Unreachable,
        };
        let message = format!("no answer from {url}: {}", error_chain(&error));
        Self::new(kind, call, message).with_source(error)
    }

    /// A stream that failed after its answer began.
    pub(super) fn broken_stream(call: Call, url: &str, error: BoxError) -> Self {
        let message = format!("the answer from {url} broke off: {}", error_chain(&*error));
        Self::new(E2bErrorKind::Unreachable, call, message).with_source(error)
    }

    /// An answer that cannot be understood.
    pub(super) fn protocol(call: Call, what: impl fmt::Display) -> Self {
        Self::new(
            E2bErrorKind::Protocol,
            call,
            format!("unexpected answer: {what}"),
        )
    }

    /// A command that ran past `after`; `killed` says what became of its process.
    pub(super) fn command_timeout(call: Call, after: Duration, killed: &str) -> Self {
        let message = format!("timed out after {after:?}; {killed}");
        Self::new(E2bErrorKind::Timeout, call, message)
    }

    fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.inner.source = Some(source.into());
        self
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> E2bErrorKind {
        self.inner.kind
    }

    /// The call that failed, e.g. `"POST /sandboxes"` or `"files.read /home/user/a.txt"`.
    pub fn call(&self) -> &str {
        &self.inner.call.name
    }

    /// The sandbox the call concerned, when it concerned one.
    pub fn sandbox_id(&self) -> Option<&str> {
        self.inner.call.sandbox_id.as_deref()
    }

    /// The HTTP status of the answer, when there was one.
    pub fn status(&self) -> Option<StatusCode> {
        self.inner.status
    }

    /// The server's own message, when it sent one.
    pub fn server_message(&self) -> Option<&str> {
        self.inner.server_message.as_deref()
    }

    /// The Connect error code when envd answered with one (`"not_found"`,
    /// `"already_exists"`, `"deadline_exceeded"`, ...).
    pub fn code(&self) -> Option<&str> {
        self.inner.code.as_deref()
    }
}

impl fmt::Display for E2bError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.write_str(&inner.call.name)?;
        if let Some(id) = &inner.call.sandbox_id {
            write!(f, " (sandbox {id})")?;
        }
        write!(f, ": {}", inner.message)
    }
}

impl std::error::Error for E2bError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner
            .source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// `head` (a status or a Connect code), the server's message, and what to check for `kind`.
fn describe(
    kind: E2bErrorKind,
    service: Service,
    head: String,
    server_message: Option<&str>,
) -> String {
    let mut message = head.clone();
    if let Some(said) = server_message {
        let _ = write!(message, ": {said:?}");
    }
    match (kind, service) {
        (E2bErrorKind::Unauthorized, Service::Api) => message.push_str(
            ": the E2B API refused the API key; check E2B_API_KEY (on Cloudflare Workers, the \
             secret that holds it) and that the key belongs to the team that owns the sandbox",
        ),
        (E2bErrorKind::Unauthorized, Service::Envd) => message.push_str(
            ": envd refused the sandbox's access token; open the sandbox again for a fresh one",
        ),
        (E2bErrorKind::NotFound, Service::Envd) if head.starts_with("502") => message.push_str(
            ": the sandbox is not running: paused, killed, or past its lifetime \
             (E2bSandbox::timeout)",
        ),
        _ => {}
    }
    message
}

/// The `message` of an E2B error body (`{"code": 404, "message": "..."}`), else the body's
/// text, bounded; `None` for an empty body.
fn server_message(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Body {
        message: String,
    }
    if let Ok(Body { message }) = serde_json::from_slice(body) {
        return Some(message);
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let mut end = text.len().min(MAX_SERVER_MESSAGE);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Some(text[..end].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e2b_overload_is_transient_and_a_gone_sandbox_is_not() {
        let busy = E2bError::answer(
            Call::api("POST /sandboxes", None),
            StatusCode::SERVICE_UNAVAILABLE,
            b"",
        );
        assert!(crate::retry::is_transient(&busy), "{busy}");
        let refused = E2bError::answer(
            Call::api("POST /sandboxes", None),
            StatusCode::BAD_REQUEST,
            b"",
        );
        assert!(!crate::retry::is_transient(&refused));
        let paused = E2bError::answer(Call::envd("files.read", "i1"), StatusCode::BAD_GATEWAY, b"");
        assert_eq!(paused.kind(), E2bErrorKind::NotFound);
        assert!(
            !crate::retry::is_transient(&paused),
            "a sandbox not running stays so"
        );
    }

    #[test]
    fn a_refused_key_says_what_to_check() {
        let call = Call::api("POST /sandboxes", None);
        let body = br#"{"code":401,"message":"Invalid API key"}"#;
        let error = E2bError::answer(call, StatusCode::UNAUTHORIZED, body);
        assert_eq!(error.kind(), E2bErrorKind::Unauthorized);
        assert_eq!(error.server_message(), Some("Invalid API key"));
        let text = error.to_string();
        assert!(
            text.starts_with("POST /sandboxes: 401 Unauthorized"),
            "{text}"
        );
        assert!(text.contains("E2B_API_KEY"), "{text}");
        assert!(text.contains("Workers"), "{text}");
    }

    #[test]
    fn errors_name_the_call_and_the_sandbox() {
        let call = Call::envd("files.read /home/user/a.txt", "i123");
        let error = E2bError::connect(
            call,
            Some(StatusCode::NOT_FOUND),
            ConnectError {
                code: "not_found".into(),
                message: "no such file".into(),
            },
        );
        assert_eq!(error.kind(), E2bErrorKind::NotFound);
        assert_eq!(error.sandbox_id(), Some("i123"));
        assert_eq!(
            error.to_string(),
            "files.read /home/user/a.txt (sandbox i123): not_found (404 Not Found): \"no such file\""
        );
    }

    #[test]
    fn transport_failures_name_the_url() {
        let call = Call::api("POST /sandboxes", None);
        let failure = TransportError::new(TransportErrorKind::Connect, "connection refused");
        let error = E2bError::transport(call, "https://api.e2b.app/sandboxes", failure);
        assert_eq!(error.kind(), E2bErrorKind::Unreachable);
        let text = error.to_string();
        assert!(text.contains("https://api.e2b.app/sandboxes"), "{text}");
        assert!(text.contains("connection refused"), "{text}");
    }

    #[test]
    fn long_bodies_are_bounded() {
        let page = "x".repeat(10_000);
        let message = server_message(page.as_bytes()).unwrap();
        assert_eq!(message.len(), MAX_SERVER_MESSAGE);
        assert_eq!(server_message(b"  "), None);
    }
}
