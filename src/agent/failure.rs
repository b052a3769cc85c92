//! The `failure_reason` an execution records for a handler error (PROTOCOL.md §4.5).
//!
//! The text before the first colon is a stable token (read back by
//! [`FailureReason`](crate::wire::FailureReason)): a kernel reason (`policy_denied`,
//! `execution_token_budget_exceeded`, `approval_timeout`, `rate_limit_exceeded`,
//! `rate_limiter_unavailable`) or one of `tool_error`, `agent_error`, `input_invalid`. Every
//! other error is `agent_error: <kind>: <text>`, as the Python SDK writes
//! `agent_error: <exception type>: <text>` (a checkpoint that cannot be restored included).

use crate::error::{ErrorKind, HandlerError, error_chain};

/// The reason to fail the execution with, for a handler error that is not control flow.
pub(crate) fn failure_reason(error: &HandlerError) -> String {
    let Some(rebuno) = error.as_rebuno() else {
        return format!("agent_error: {}", error_chain(error.as_dyn()));
    };
    match rebuno.kind() {
        ErrorKind::Policy => {
            let reason = rebuno.reason().unwrap_or("policy_denied");
            if is_token(reason) {
                reason.to_owned()
            } else {
                format!("policy_denied: {reason}")
            }
        }
        ErrorKind::RateLimited => rebuno.reason().unwrap_or("rate_limit_exceeded").to_owned(),
        ErrorKind::Tool => format!("tool_error: {}", rebuno.message()),
        kind => format!("agent_error: {kind:?}: {}", error_chain(error.as_dyn())),
    }
}

/// The input did not deserialize into the handler's type.
pub(crate) fn input_invalid(detail: &str) -> String {
    format!("input_invalid: {detail}")
}

fn is_token(reason: &str) -> bool {
    !reason.is_empty()
        && reason
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn reasons_follow_the_protocol_tokens() {
        let policy = |reason: &str| {
            HandlerError::from(Error::new(ErrorKind::Policy, reason).with_reason(reason))
        };
        assert_eq!(
            failure_reason(&policy("approval_timeout")),
            "approval_timeout"
        );
        assert_eq!(
            failure_reason(&policy("no shell for you")),
            "policy_denied: no shell for you"
        );
        let limited = HandlerError::from(
            Error::new(ErrorKind::RateLimited, "x").with_reason("rate_limit_exceeded"),
        );
        assert_eq!(failure_reason(&limited), "rate_limit_exceeded");
        let tool = HandlerError::from(
            Error::new(ErrorKind::Tool, "search: boom").with_tool("search", None),
        );
        assert_eq!(failure_reason(&tool), "tool_error: search: boom");
        assert_eq!(
            failure_reason(&HandlerError::from("disk full")),
            "agent_error: disk full"
        );
        let gone = HandlerError::from(Error::new(ErrorKind::CheckpointUnavailable, "c1 expired"));
        assert_eq!(
            failure_reason(&gone),
            "agent_error: CheckpointUnavailable: c1 expired"
        );
        assert_eq!(
            input_invalid("missing field `q`"),
            "input_invalid: missing field `q`"
        );
    }
}
