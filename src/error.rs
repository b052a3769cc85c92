//! The SDK's error type: opaque, with a stable [`ErrorKind`] and accessors.

use std::error::Error as StdError;
use std::fmt;

use http::StatusCode;

/// A boxed error that can cross threads.
pub type BoxError = Box<dyn StdError + Send + Sync>;

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors of the Rebuno SDK.
///
/// Match on [`Error::kind`]; the message text is for people and may change.
/// The four control-flow kinds, [`ErrorKind::Blocked`], [`ErrorKind::Terminated`],
/// [`ErrorKind::LeaseSuperseded`] and [`ErrorKind::DeadlineReached`], are not failures:
/// propagate them with `?` and the dispatch ends without failing the execution.
pub struct Error {
    inner: Box<Inner>,
}

struct Inner {
    kind: ErrorKind,
    message: String,
    detail: Detail,
    source: Option<BoxError>,
}

#[derive(Default, Clone)]
struct Detail {
    status: Option<StatusCode>,
    code: Option<String>,
    reason: Option<String>,
    rule_id: Option<String>,
    tool_id: Option<String>,
    step_id: Option<String>,
    /// The scopes a `403` call needs, when the call's route names them (`executions:write`).
    scope: Option<String>,
}

/// What kind of failure an [`Error`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The kernel could not be reached, or the connection failed mid-request.
    Network,
    /// The kernel answered with an error envelope; see [`Error::code`] and [`Error::status`].
    Api,
    /// The kernel refused the agent's credentials (401).
    Unauthorized,
    /// A policy denied the step; see [`Error::reason`] and [`Error::rule_id`].
    Policy,
    /// A policy rate limit refused the step; see [`Error::reason`].
    RateLimited,
    /// A tool or step body failed, or its recorded outcome is a failure; see [`Error::tool_id`].
    Tool,
    /// Control flow: the execution waits (approval pending, or suspended on subagents).
    Blocked,
    /// Control flow: the execution is already completed, failed or cancelled.
    Terminated,
    /// Control flow: a newer delivery attempt owns this dispatch.
    LeaseSuperseded,
    /// Control flow: the host's deadline is near, so the run yields before its next step and
    /// the kernel re-delivers the dispatch (see [`rt::Deadline`](crate::rt::Deadline)).
    DeadlineReached,
    /// An inbound webhook failed signature verification.
    Signature,
    /// An inbound webhook was malformed.
    BadRequest,
    /// The agent or client was configured wrongly.
    Config,
    /// A value could not be encoded to or decoded from JSON.
    Serde,
    /// A durable call was made outside an active execution.
    Context,
    /// A resource driver failed to create, open or checkpoint its resource.
    Resource,
    /// A fork's selected checkpoint no longer exists.
    CheckpointUnavailable,
    /// The kernel answered something this SDK does not understand.
    Protocol,
    /// A wait the caller bounded ran out of time first (for example [`Client::wait`](crate::client::Client::wait)).
    Timeout,
    /// An execution a client ran to its end ([`CreateExecution::run`](crate::client::CreateExecution::run))
    /// failed or was cancelled; see [`Error::reason`].
    ExecutionFailed,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            inner: Box::new(Inner {
                kind,
                message: message.into(),
                detail: Detail::default(),
                source: None,
            }),
        }
    }

    pub(crate) fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.inner.source = Some(source.into());
        self
    }

    pub(crate) fn with_status(mut self, status: StatusCode) -> Self {
        self.inner.detail.status = Some(status);
        self
    }

    pub(crate) fn with_code(mut self, code: impl Into<String>) -> Self {
        self.inner.detail.code = Some(code.into());
        self
    }

    pub(crate) fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.inner.detail.reason = Some(reason.into());
        self
    }

    pub(crate) fn with_rule_id(mut self, rule_id: Option<String>) -> Self {
        self.inner.detail.rule_id = rule_id.filter(|id| !id.is_empty());
        self
    }

    pub(crate) fn with_tool(mut self, tool_id: &str, step_id: Option<&str>) -> Self {
        self.inner.detail.tool_id = Some(tool_id.to_owned());
        self.inner.detail.step_id = step_id.map(str::to_owned);
        self
    }

    pub(crate) fn with_scope(mut self, scope: impl Into<String>) -> Self {
        self.inner.detail.scope = Some(scope.into());
        self
    }

    /// The same error (kind, status, code and the rest) saying `message`, the error it explains
    /// kept as its source.
    pub(crate) fn explained(self, message: impl Into<String>) -> Self {
        let detail = self.inner.detail.clone();
        let mut error = Self::new(self.inner.kind, message).with_source(self);
        error.inner.detail = detail;
        error
    }

    pub(crate) fn serde(what: &str, source: serde_json::Error) -> Self {
        Self::new(ErrorKind::Serde, what).with_source(source)
    }

    pub(crate) fn outside_execution(what: &str) -> Self {
        Self::new(
            ErrorKind::Context,
            format!("{what} called outside an active execution"),
        )
    }

    /// A control-flow error: the execution is blocked.
    pub(crate) fn blocked() -> Self {
        Self::new(ErrorKind::Blocked, "step blocked")
    }

    /// A control-flow error: the execution is terminal.
    pub(crate) fn terminated() -> Self {
        Self::new(ErrorKind::Terminated, "execution is terminal")
    }

    /// A control-flow error: the host's deadline is near.
    pub(crate) fn deadline_reached() -> Self {
        Self::new(
            ErrorKind::DeadlineReached,
            "host deadline near; yielding to a re-delivery",
        )
    }

    /// A control-flow error: this dispatch attempt was superseded.
    pub(crate) fn superseded() -> Self {
        Self::new(ErrorKind::LeaseSuperseded, "dispatch lease superseded")
    }

    /// What kind of error this is.
    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    /// The HTTP status the kernel answered with, if the error came from a response.
    pub fn status(&self) -> Option<StatusCode> {
        self.inner.detail.status
    }

    /// The kernel's error code (`not_found`, `conflict`, ...), if any.
    pub fn code(&self) -> Option<&str> {
        self.inner.detail.code.as_deref()
    }

    /// The reason of a policy denial or rate limit.
    pub fn reason(&self) -> Option<&str> {
        self.inner.detail.reason.as_deref()
    }

    /// The policy rule that denied the step, if the kernel named one.
    pub fn rule_id(&self) -> Option<&str> {
        self.inner.detail.rule_id.as_deref()
    }

    /// The tool (or local step) whose body failed.
    pub fn tool_id(&self) -> Option<&str> {
        self.inner.detail.tool_id.as_deref()
    }

    /// The step whose body failed, when it was recorded.
    pub fn step_id(&self) -> Option<&str> {
        self.inner.detail.step_id.as_deref()
    }

    /// The scopes the refused call needs, for a `403` the kernel answered a bearer call with.
    pub(crate) fn missing_scope(&self) -> Option<&str> {
        self.inner.detail.scope.as_deref()
    }

    /// Whether this is control flow (blocked, terminated, superseded, deadline reached) rather
    /// than a failure.
    pub fn is_control_flow(&self) -> bool {
        matches!(
            self.kind(),
            ErrorKind::Blocked
                | ErrorKind::Terminated
                | ErrorKind::LeaseSuperseded
                | ErrorKind::DeadlineReached
        )
    }

    /// Whether retrying the same call later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self.kind() {
            ErrorKind::Network | ErrorKind::RateLimited => true,
            ErrorKind::Api => self.status().is_some_and(|s| s.is_server_error()),
            _ => false,
        }
    }

    /// A copy without the source chain, for handing a found error back by value.
    pub(crate) fn clone_shallow(&self) -> Self {
        Self {
            inner: Box::new(Inner {
                kind: self.inner.kind,
                message: self.inner.message.clone(),
                detail: self.inner.detail.clone(),
                source: None,
            }),
        }
    }

    /// The message without the source chain.
    pub(crate) fn message(&self) -> &str {
        &self.inner.message
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("Error");
        out.field("kind", &self.inner.kind)
            .field("message", &self.inner.message);
        let detail = &self.inner.detail;
        if let Some(status) = detail.status {
            out.field("status", &status.as_u16());
        }
        for (name, value) in [
            ("code", &detail.code),
            ("reason", &detail.reason),
            ("rule_id", &detail.rule_id),
            ("tool_id", &detail.tool_id),
            ("step_id", &detail.step_id),
            ("scope", &detail.scope),
        ] {
            if let Some(value) = value {
                out.field(name, value);
            }
        }
        if let Some(source) = &self.inner.source {
            out.field("source", source);
        }
        out.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.inner.message)
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.inner
            .source
            .as_ref()
            .map(|source| &**source as &(dyn StdError + 'static))
    }
}

/// An error and its sources, `outer: inner: …`, skipping a source whose text its parent
/// already shows (many errors print their source inside their own message).
pub(crate) fn error_chain(error: &(dyn StdError + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The first Rebuno [`Error`] in `error`'s source chain, itself included.
pub(crate) fn find_rebuno<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a Error> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(found) = error.downcast_ref::<Error>() {
            return Some(found);
        }
        current = error.source();
    }
    None
}

/// The error a handler, tool body or step body returns.
///
/// Anything that converts into a boxed error converts into it, so `?` works on `std::io::Error`,
/// `anyhow::Error`, `&str`, `String` and [`Error`] alike. A Rebuno [`Error`] keeps its kind, so
/// control flow propagates unchanged.
///
/// ```
/// async fn handler(input: serde_json::Value) -> Result<String, rebuno::HandlerError> {
///     let name = input["name"].as_str().ok_or("name is required")?;
///     Ok(format!("hello, {name}"))
/// }
/// ```
pub struct HandlerError(BoxError);

impl HandlerError {
    /// The Rebuno [`Error`] inside, if this error is one or wraps one.
    pub fn as_rebuno(&self) -> Option<&Error> {
        find_rebuno(&*self.0)
    }

    /// The error as a trait object.
    pub(crate) fn as_dyn(&self) -> &(dyn StdError + 'static) {
        &*self.0
    }

    /// The boxed error.
    pub fn into_inner(self) -> BoxError {
        self.0
    }
}

impl<E: Into<BoxError>> From<E> for HandlerError {
    fn from(error: E) -> Self {
        Self(error.into())
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handler_error_finds_a_wrapped_rebuno_error() {
        #[derive(Debug)]
        struct Wrapper(Error);
        impl fmt::Display for Wrapper {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("wrapped")
            }
        }
        impl StdError for Wrapper {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                Some(&self.0)
            }
        }
        let error = HandlerError::from(Wrapper(Error::blocked()));
        assert_eq!(error.as_rebuno().map(Error::kind), Some(ErrorKind::Blocked));
        assert!(HandlerError::from("plain").as_rebuno().is_none());
    }

    #[test]
    fn control_flow_kinds() {
        assert!(Error::blocked().is_control_flow());
        assert!(Error::terminated().is_control_flow());
        assert!(Error::superseded().is_control_flow());
        assert!(Error::new(ErrorKind::DeadlineReached, "deadline").is_control_flow());
        assert!(!Error::new(ErrorKind::Tool, "x").is_control_flow());
        assert!(!Error::new(ErrorKind::Timeout, "x").is_control_flow());
    }
}
