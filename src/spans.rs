//! The span contract: the [`tracing`] spans the SDK emits, held stable across 0.x minor
//! versions (a field may be added; none is renamed or removed). The SDK never installs a
//! subscriber: pick one (`tracing-subscriber`, an OpenTelemetry layer) and filter on the names
//! below. A test pins every name and field (`tests/integration/spans.rs`).
//!
//! # `rebuno.dispatch` ([`DISPATCH`])
//!
//! One per delivered dispatch this process runs, from the acknowledgement to the end of the run.
//!
//! | field | set | value |
//! |---|---|---|
//! | `agent_id` | at start | the agent's id |
//! | `execution_id` | at start | the execution (a UUIDv7) |
//! | `dispatch_id` | at start | the dispatch |
//! | `attempt` | at start | the delivery attempt, from 1 |
//! | `outcome` | at the end | `completed`, `failed` or `stopped` |
//! | `failure_reason` | when `failed` | the reason the execution failed with |
//! | `stop` | when `stopped` | why the dispatch ended without an outcome: `blocked` (an approval, a suspension, a rate-limit park), `superseded` (a newer dispatch took over), `terminated` (the execution ended elsewhere), `deadline` (the host's time ran out), `kernel_unreachable`, or `other` |
//!
//! # `rebuno.step` ([`STEP`])
//!
//! One per durable call inside a handler (tool call, local step, LLM call, subagent), from its
//! submit to its recorded outcome; a child of the dispatch span.
//!
//! | field | set | value |
//! |---|---|---|
//! | `execution_id` | at start | the execution |
//! | `kind` | at start | `tool_call`, `llm_call` or `local` |
//! | `target` | at start | tool id, model id or step name |
//! | `idempotency` | at start | `safe_to_retry` or `at_most_once` |
//! | `step_id` | after the submit | the kernel's 64-hex step id (absent when none was recorded) |
//! | `replayed` | after the submit | `true` when the kernel answered from its record and no body ran |
//! | `outcome` | at the end | `succeeded`, `failed` (the body's error, live or replayed), `denied` (policy), `blocked` (waits for an approval), `rate_limited`, `stopped` (control flow ended the dispatch) or `error` (the SDK could not complete the call) |
//! | `failure_reason` | when `failed` or `denied` | the error's text |
//! | `attempts` | when the body (or the LLM request) ran again under a [retry policy](crate::retry) | how many times it has run so far |
//!
//! Each failed attempt that is tried again leaves an event on the step span, `attempt failed;
//! retrying`, with `attempt` (from 1), `delay_ms` and `error`. The OpenTelemetry exporter
//! counts such steps in `rebuno.steps` with an `attempts` attribute.
//!
//! A re-delivery replays: its step spans carry the same `step_id` as the first delivery's,
//! with `replayed = true`.
//!
//! # `rebuno.create` ([`CREATE`])
//!
//! One per [`CreateExecution::send`](crate::client::CreateExecution::send), in the caller's
//! process (a subagent's creation is inside its parent's step span).
//!
//! | field | set | value |
//! |---|---|---|
//! | `agent_id` | at start | the agent the execution is for |
//! | `traceparent` | at start, when given | the caller's W3C trace context ([`CreateExecution::traceparent`](crate::client::CreateExecution::traceparent)) |
//! | `execution_id` | when created | the new execution |
//!
//! # Trace context on the provider's side
//!
//! A live durable LLM call, a subagent's creation and an MCP tool call (in its `_meta`) carry a
//! W3C `traceparent` (an LLM request keeps one it has already):
//! the trace id is the execution id (a UUID is 128 bits) and the parent span id is the first
//! 8 bytes of the step id ([`traceparent`]). Every dispatch of an execution, on any host, so
//! names the same trace, and a provider or gateway that traces joins it without the kernel
//! carrying any context.

use tracing::Span;

use crate::error::{Error, ErrorKind};

/// The name of a dispatch's span.
pub const DISPATCH: &str = "rebuno.dispatch";

/// The name of a durable call's span.
pub const STEP: &str = "rebuno.step";

/// The name of an execution creation's span.
pub const CREATE: &str = "rebuno.create";

/// The W3C `traceparent` of a step: `00-<execution id as 32 hex>-<first 16 hex of the step
/// id>-01`. `None` when the execution id is not a UUID or the step id is not hex.
///
/// ```
/// let parent = rebuno::spans::traceparent(
///     "0192f1a0-0000-7000-8000-000000000001",
///     "66521f99aa0c6b1c9b5fd1c1e0b43e6f8ef7e77b3a3a2f4f5c1e6c1d2e3f4a5b",
/// );
/// assert_eq!(
///     parent.as_deref(),
///     Some("00-0192f1a0000070008000000000000001-66521f99aa0c6b1c-01")
/// );
/// ```
pub fn traceparent(execution_id: &str, step_id: &str) -> Option<String> {
    let trace: String = execution_id.chars().filter(|c| *c != '-').collect();
    let span = step_id.get(..16)?;
    let hex = |text: &str, len: usize| {
        text.len() == len
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            && text.bytes().any(|b| b != b'0')
    };
    (hex(&trace, 32) && hex(span, 16)).then(|| format!("00-{trace}-{span}-01"))
}

/// Whether `value` is a W3C `traceparent` this SDK can use: version `00`, a non-zero 32-hex
/// trace id and 16-hex parent id, and 2-hex flags, all lowercase.
pub(crate) fn is_traceparent(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    let hex = |text: &str, len: usize| {
        text.len() == len
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let non_zero = |text: &str| text.bytes().any(|b| b != b'0');
    matches!(parts.as_slice(), [version, trace, parent, flags]
        if *version == "00" && hex(trace, 32) && non_zero(trace)
            && hex(parent, 16) && non_zero(parent) && hex(flags, 2))
}

/// The `outcome` of a step that ended with `error`.
pub(crate) fn step_outcome(error: &Error) -> &'static str {
    match error.kind() {
        ErrorKind::Tool => "failed",
        ErrorKind::Policy => "denied",
        ErrorKind::Blocked => "blocked",
        ErrorKind::RateLimited => "rate_limited",
        ErrorKind::Terminated | ErrorKind::LeaseSuperseded | ErrorKind::DeadlineReached => {
            "stopped"
        }
        _ => "error",
    }
}

/// Records how a step ended on `span`.
pub(crate) fn record_step_end(span: &Span, ended: std::result::Result<(), &Error>) {
    match ended {
        Ok(()) => {
            span.record("outcome", "succeeded");
        }
        Err(error) => {
            let outcome = step_outcome(error);
            span.record("outcome", outcome);
            if matches!(outcome, "failed" | "denied") {
                span.record("failure_reason", error.to_string());
            }
        }
    }
}

/// The `stop` of a dispatch that ended without an outcome because of `kind`.
pub(crate) fn stop_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Blocked => "blocked",
        ErrorKind::LeaseSuperseded => "superseded",
        ErrorKind::Terminated => "terminated",
        ErrorKind::DeadlineReached => "deadline",
        ErrorKind::Network | ErrorKind::Timeout => "kernel_unreachable",
        _ => "other",
    }
}

/// Records on the current (dispatch) span that the run stopped for `kind`.
pub(crate) fn record_stop(kind: ErrorKind) {
    let span = Span::current();
    span.record("outcome", "stopped");
    span.record("stop", stop_name(kind));
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEP: &str = "66521f99aa0c6b1c9b5fd1c1e0b43e6f8ef7e77b3a3a2f4f5c1e6c1d2e3f4a5b";

    #[test]
    fn a_traceparent_needs_a_uuid_and_a_hex_step_id() {
        let exec = "0192f1a0-0000-7000-8000-000000000001";
        assert!(traceparent(exec, STEP).is_some());
        assert_eq!(traceparent("not-a-uuid", STEP), None);
        assert_eq!(traceparent(exec, "66521f99"), None, "too short");
        assert_eq!(traceparent(exec, "zz521f99aa0c6b1c"), None, "not hex");
        assert_eq!(
            traceparent(exec, "66521F99AA0C6B1C"),
            None,
            "W3C ids are lowercase"
        );
        assert_eq!(
            traceparent("00000000-0000-0000-0000-000000000000", STEP),
            None,
            "all zero"
        );
        assert_eq!(
            traceparent(exec, "0000000000000000ff"),
            None,
            "all-zero span id"
        );
    }
}
