//! Refusals carried inside other errors.
//!
//! When the kernel refuses an LLM call, the durable LLM transport answers the provider SDK with
//! an HTTP error whose body says `rebuno_refusal: <decision>[ reason=<reason>]`, so the provider
//! SDK raises its own error type. [`raise_for_refusal`] finds that marker anywhere in an error's
//! `source()` chain and turns it back into the Rebuno error it stands for.

use std::error::Error as StdError;

use crate::error::{Error, ErrorKind, find_rebuno};

/// The marker's prefix in a refusal body.
pub const REFUSAL_TYPE: &str = "rebuno_refusal";

/// How many links of a source chain are searched.
const MAX_LINKS: usize = 10;

/// The decision behind a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RefusalKind {
    /// Waiting on an approval or subagents (`blocked`, `execution_blocked`).
    Blocked,
    /// Denied by policy.
    Denied,
    /// Refused by a rate limit.
    RateLimited,
    /// The execution is terminal.
    Terminated,
    /// A newer delivery attempt owns the dispatch.
    LeaseSuperseded,
}

/// A refusal the kernel made, as reported inside another error.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refusal {
    /// What was decided.
    pub kind: RefusalKind,
    /// Why (always set for denials and rate limits, with the protocol's defaults).
    pub reason: Option<String>,
}

impl Refusal {
    /// A refusal of `kind`; denials and rate limits get the protocol's default reason.
    pub fn new(kind: RefusalKind, reason: Option<String>) -> Self {
        let default = match kind {
            RefusalKind::Denied => Some("policy_denied"),
            RefusalKind::RateLimited => Some("rate_limit_exceeded"),
            _ => None,
        };
        Self {
            kind,
            reason: reason
                .filter(|r| !r.is_empty())
                .or_else(|| default.map(str::to_owned)),
        }
    }

    /// Searches `error` and up to nine of its sources for a refusal marker.
    pub fn find(error: &(dyn StdError + 'static)) -> Option<Self> {
        let mut current = Some(error);
        for _ in 0..MAX_LINKS {
            let link = current?;
            if let Some(refusal) = parse(&link.to_string()) {
                return Some(refusal);
            }
            current = link.source();
        }
        None
    }

    /// The marker text: `rebuno_refusal: denied reason=policy_denied`.
    pub fn message(&self) -> String {
        let decision = match self.kind {
            RefusalKind::Blocked => "blocked",
            RefusalKind::Denied => "denied",
            RefusalKind::RateLimited => "rate_limited",
            RefusalKind::Terminated => "execution_terminal",
            RefusalKind::LeaseSuperseded => "lease_superseded",
        };
        match (&self.reason, self.kind) {
            (Some(reason), RefusalKind::Denied | RefusalKind::RateLimited) => {
                format!("{REFUSAL_TYPE}: {decision} reason={reason}")
            }
            _ => format!("{REFUSAL_TYPE}: {decision}"),
        }
    }

    /// The Rebuno error this refusal stands for.
    pub fn into_error(self) -> Error {
        let reason = self.reason.unwrap_or_default();
        match self.kind {
            RefusalKind::Blocked => Error::blocked(),
            RefusalKind::Terminated => Error::terminated(),
            RefusalKind::LeaseSuperseded => Error::superseded(),
            RefusalKind::Denied => {
                Error::new(ErrorKind::Policy, reason.clone()).with_reason(reason)
            }
            RefusalKind::RateLimited => {
                Error::new(ErrorKind::RateLimited, reason.clone()).with_reason(reason)
            }
        }
    }
}

/// `Ok(())` unless `error` is or carries a refusal; then the matching Rebuno error, so `?`
/// unwinds the dispatch the way the refusal meant.
///
/// ```
/// # fn provider_call() -> Result<(), std::io::Error> {
/// #     Err(std::io::Error::other(r#"403: {"error":{"type":"rebuno_refusal","message":"rebuno_refusal: denied reason=no_gpt"}}"#))
/// # }
/// let refused = provider_call().unwrap_err();
/// let error = rebuno::llm::raise_for_refusal(&refused).unwrap_err();
/// assert_eq!(error.kind(), rebuno::ErrorKind::Policy);
/// assert_eq!(error.reason(), Some("no_gpt"));
/// ```
///
/// # Errors
///
/// The refusal as an [`Error`]: control flow for blocked, terminated and superseded;
/// [`ErrorKind::Policy`] or [`ErrorKind::RateLimited`] with the reason otherwise.
pub fn raise_for_refusal(error: &(dyn StdError + 'static)) -> Result<(), Error> {
    if let Some(found) = find_rebuno(error).filter(|e| refused(e)) {
        return Err(found.clone_shallow());
    }
    match Refusal::find(error) {
        Some(refusal) => Err(refusal.into_error()),
        None => Ok(()),
    }
}

fn refused(error: &Error) -> bool {
    error.is_control_flow() || matches!(error.kind(), ErrorKind::Policy | ErrorKind::RateLimited)
}

/// Parses the first `rebuno_refusal: (\w+)(?: reason=(.*))?` out of `text`.
fn parse(text: &str) -> Option<Refusal> {
    text.match_indices(REFUSAL_TYPE)
        .find_map(|(at, _)| parse_at(&text[at + REFUSAL_TYPE.len()..]))
}

/// Parses `: <decision>[ reason=<reason>]` right after a marker.
fn parse_at(after: &str) -> Option<Refusal> {
    let rest = after.strip_prefix(": ")?;
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    let decision = &rest[..end];
    let reason = rest[end..]
        .strip_prefix(" reason=")
        .map(|r| {
            r.lines()
                .next()
                .unwrap_or("")
                .trim_end_matches(['\'', '"', '}', ' ', '\n'])
        })
        .filter(|r| !r.is_empty())
        .map(str::to_owned);
    let (kind, default) = match decision {
        "blocked" | "execution_blocked" => (RefusalKind::Blocked, None),
        "denied" => (RefusalKind::Denied, Some("policy_denied")),
        "rate_limited" => (RefusalKind::RateLimited, Some("rate_limit_exceeded")),
        "execution_terminal" => (RefusalKind::Terminated, None),
        "lease_superseded" => (RefusalKind::LeaseSuperseded, None),
        _ => return None,
    };
    Some(Refusal {
        kind,
        reason: reason.or_else(|| default.map(str::to_owned)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Provider(String, Option<Box<Provider>>);

    impl std::fmt::Display for Provider {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl StdError for Provider {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            self.1.as_deref().map(|p| p as &(dyn StdError + 'static))
        }
    }

    #[test]
    fn markers_parse_like_the_python_sdk() {
        let body = r#"{"error":{"type":"rebuno_refusal","message":"rebuno_refusal: denied reason=no_gpt"}}"#;
        assert_eq!(
            parse(body),
            Some(Refusal {
                kind: RefusalKind::Denied,
                reason: Some("no_gpt".into())
            })
        );
        assert_eq!(
            parse("rebuno_refusal: rate_limited").and_then(|r| r.reason),
            Some("rate_limit_exceeded".into())
        );
        assert_eq!(
            parse("rebuno_refusal: execution_blocked").map(|r| r.kind),
            Some(RefusalKind::Blocked)
        );
        assert_eq!(parse("rebuno_refusal: teleport"), None);
        assert_eq!(parse("nothing here"), None);
    }

    #[test]
    fn messages_round_trip() {
        for refusal in [
            Refusal {
                kind: RefusalKind::Denied,
                reason: Some("no shell".into()),
            },
            Refusal {
                kind: RefusalKind::RateLimited,
                reason: Some("rate_limit_exceeded".into()),
            },
            Refusal {
                kind: RefusalKind::Blocked,
                reason: None,
            },
            Refusal {
                kind: RefusalKind::Terminated,
                reason: None,
            },
        ] {
            assert_eq!(parse(&refusal.message()), Some(refusal));
        }
    }

    #[test]
    fn refusals_are_found_deep_in_a_source_chain() {
        let inner = Provider(
            "403 Forbidden: rebuno_refusal: denied reason=budget'}".into(),
            None,
        );
        let outer = Provider("completion failed".into(), Some(Box::new(inner)));
        let error = raise_for_refusal(&outer).unwrap_err();
        assert_eq!(
            (error.kind(), error.reason()),
            (ErrorKind::Policy, Some("budget"))
        );
        assert!(raise_for_refusal(&Provider("plain".into(), None)).is_ok());
    }
}
