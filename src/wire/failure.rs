//! An execution's `failure_reason`, read back: the stable token before the first colon and the
//! free text after it (PROTOCOL.md §4.5). Dashboards, alerts and policy replays key on the
//! token; the text is for people and changes between SDKs and versions.

use std::fmt;

/// The stable token that starts a `failure_reason`.
///
/// The documented tokens each have a variant; anything else an agent or a kernel writes
/// (`dispatch_exhausted`, `deadline_exceeded`, a cancellation's reason, ...) is kept as
/// [`FailureToken::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureToken<'a> {
    /// A policy rule denied a step (`policy_denied`).
    PolicyDenied,
    /// The execution spent its token budget (`execution_token_budget_exceeded`).
    ExecutionTokenBudgetExceeded,
    /// An approval expired before anyone decided (`approval_timeout`).
    ApprovalTimeout,
    /// A rate limit refused a step (`rate_limit_exceeded`).
    RateLimitExceeded,
    /// The rate limiter could not be reached and its rule fails closed
    /// (`rate_limiter_unavailable`).
    RateLimiterUnavailable,
    /// A tool failed and the handler let the error end the run (`tool_error`).
    ToolError,
    /// The handler failed in any other way: an error, a panic (`agent_error`).
    AgentError,
    /// The input did not match the agent's input type (`input_invalid`).
    InputInvalid,
    /// Any other token, as written.
    Other(&'a str),
}

impl<'a> FailureToken<'a> {
    /// The token for `text`, which is a whole token (no colon, no detail).
    fn of(text: &'a str) -> Self {
        match text {
            "policy_denied" => Self::PolicyDenied,
            "execution_token_budget_exceeded" => Self::ExecutionTokenBudgetExceeded,
            "approval_timeout" => Self::ApprovalTimeout,
            "rate_limit_exceeded" => Self::RateLimitExceeded,
            "rate_limiter_unavailable" => Self::RateLimiterUnavailable,
            "tool_error" => Self::ToolError,
            "agent_error" => Self::AgentError,
            "input_invalid" => Self::InputInvalid,
            other => Self::Other(other),
        }
    }

    /// The token as the kernel stores it.
    pub fn as_str(&self) -> &'a str {
        match self {
            Self::PolicyDenied => "policy_denied",
            Self::ExecutionTokenBudgetExceeded => "execution_token_budget_exceeded",
            Self::ApprovalTimeout => "approval_timeout",
            Self::RateLimitExceeded => "rate_limit_exceeded",
            Self::RateLimiterUnavailable => "rate_limiter_unavailable",
            Self::ToolError => "tool_error",
            Self::AgentError => "agent_error",
            Self::InputInvalid => "input_invalid",
            Self::Other(text) => text,
        }
    }
}

impl fmt::Display for FailureToken<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `failure_reason` split into its token and its detail.
///
/// ```
/// use rebuno::wire::{FailureReason, FailureToken};
///
/// let reason = FailureReason::parse("tool_error: search: upstream timed out");
/// assert_eq!(reason.token, FailureToken::ToolError);
/// assert_eq!(reason.detail, Some("search: upstream timed out"));
///
/// let limited = FailureReason::parse("rate_limit_exceeded");
/// assert_eq!(limited.token, FailureToken::RateLimitExceeded);
/// assert_eq!(limited.detail, None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailureReason<'a> {
    /// The stable token.
    pub token: FailureToken<'a>,
    /// What follows the token's colon, trimmed (`None` when nothing does).
    pub detail: Option<&'a str>,
}

impl<'a> FailureReason<'a> {
    /// Splits `text` at its first colon. Text with no colon is a token alone; surrounding
    /// whitespace is ignored.
    pub fn parse(text: &'a str) -> Self {
        let (token, detail) = match text.split_once(':') {
            Some((token, detail)) => (token, Some(detail.trim()).filter(|d| !d.is_empty())),
            None => (text, None),
        };
        Self {
            token: FailureToken::of(token.trim()),
            detail,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_token_reads_back_and_prints_as_written() {
        for token in [
            "policy_denied",
            "execution_token_budget_exceeded",
            "approval_timeout",
            "rate_limit_exceeded",
            "rate_limiter_unavailable",
            "tool_error",
            "agent_error",
            "input_invalid",
        ] {
            let parsed = FailureReason::parse(token);
            assert!(!matches!(parsed.token, FailureToken::Other(_)), "{token}");
            assert_eq!(parsed.token.to_string(), token);
            assert_eq!(parsed.detail, None);
        }
    }

    #[test]
    fn the_detail_is_everything_after_the_first_colon() {
        let reason = FailureReason::parse("agent_error: CheckpointUnavailable: ref c1: gone");
        assert_eq!(reason.token, FailureToken::AgentError);
        assert_eq!(reason.detail, Some("CheckpointUnavailable: ref c1: gone"));
        let kernel = FailureReason::parse("dispatch_exhausted");
        assert_eq!(kernel.token, FailureToken::Other("dispatch_exhausted"));
        assert_eq!(FailureReason::parse("tool_error:  ").detail, None);
    }
}
