//! What a `401` from the kernel means for a client: which API key it refused, and what to check;
//! and for a `403` that lacks a scope, which key lacks it. The key itself is never shown.

use http::StatusCode;

use crate::Secret;
use crate::error::{Error, ErrorKind};

/// The variable a client reads its API key from when the builder is given none.
pub(super) const API_KEY_VAR: &str = "REBUNO_API_KEY";

/// Where a client's bearer token came from, for the hint of a `401`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeySource {
    /// [`ClientBuilder::api_key`](super::ClientBuilder::api_key).
    Builder,
    /// The `REBUNO_API_KEY` variable.
    Env,
    /// No key: requests carry no `Authorization` header.
    Missing,
}

/// The client's token, `given` to the builder or else read from `REBUNO_API_KEY` (an empty one
/// is none), and where it came from.
pub(super) fn api_key(given: Option<Secret>) -> (Option<Secret>, KeySource) {
    let (key, source) = match given {
        Some(key) => (Some(key), KeySource::Builder),
        None => (
            crate::config::env(API_KEY_VAR).map(Secret::new),
            KeySource::Env,
        ),
    };
    match key.filter(|key| !key.is_empty()) {
        Some(key) => (Some(key), source),
        None => (None, KeySource::Missing),
    }
}

/// `error` with what to check when it is the kernel refusing the client's credentials (`401`),
/// or with which key lacks the scope a `403` names; `error` itself otherwise. The kernel's own
/// error stays as the source.
pub(super) fn explain(error: Error, key: KeySource) -> Error {
    if error.missing_scope().is_some() {
        let whose = match key {
            KeySource::Builder => "the key given to `ClientBuilder::api_key`".to_owned(),
            KeySource::Env => format!(
                "the key in {API_KEY_VAR} (which subagents also create their executions with)"
            ),
            KeySource::Missing => "no key".to_owned(),
        };
        let message = format!("{}. This client sends {whose}", error.message());
        return error.explained(message);
    }
    let status = error.status();
    if error.kind() != ErrorKind::Unauthorized && status != Some(StatusCode::UNAUTHORIZED) {
        return error;
    }
    let code = error.code().unwrap_or("unauthorized").to_owned();
    let status = status.unwrap_or(StatusCode::UNAUTHORIZED);
    Error::new(ErrorKind::Unauthorized, hint(key))
        .with_status(status)
        .with_code(code)
        .with_source(error)
}

/// The message of a refused client request, by where its key came from.
fn hint(key: KeySource) -> String {
    // What the key must be: a key the kernel issued, or the token it was started with.
    const KEYS: &str = concat!(
        "one of the kernel's API keys (or its bootstrap token, ",
        "`REBUNO_BEARER_TOKEN` for rebuno-dev)"
    );
    match key {
        KeySource::Builder => format!(
            "the kernel refused the API key given to `ClientBuilder::api_key` (401 \
             unauthorized): check that it is {KEYS}, and not revoked"
        ),
        KeySource::Env => format!(
            "the kernel refused the API key in {API_KEY_VAR} (401 unauthorized): check that \
             {API_KEY_VAR} is {KEYS}, and not revoked"
        ),
        KeySource::Missing => format!(
            "the kernel requires an API key (401 unauthorized): set {API_KEY_VAR} (or \
             `ClientBuilder::api_key`) to {KEYS}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> Error {
        crate::kernel::error_from_response(
            StatusCode::UNAUTHORIZED,
            br#"{"code":"unauthorized","message":"unauthorized"}"#,
        )
    }

    #[test]
    fn a_401_names_the_key_to_check_and_keeps_kind_status_and_code() {
        for (source, names) in [
            (KeySource::Builder, "ClientBuilder::api_key"),
            (KeySource::Env, "check that REBUNO_API_KEY is"),
            (KeySource::Missing, "set REBUNO_API_KEY"),
        ] {
            let error = explain(refused(), source);
            let text = error.to_string();
            assert!(text.contains(names) && text.contains("API keys"), "{text}");
            assert_eq!(error.kind(), ErrorKind::Unauthorized);
            assert_eq!(error.status(), Some(StatusCode::UNAUTHORIZED));
            assert_eq!(error.code(), Some("unauthorized"));
        }
    }

    #[test]
    fn a_missing_scope_names_the_key_that_lacks_it() {
        let request = http::Request::builder()
            .method(http::Method::POST)
            .uri("http://kernel/v0/executions")
            .body(bytes::Bytes::from_static(br#"{"agent_id":"a"}"#))
            .unwrap();
        let refused = || {
            crate::kernel::explain::explain(
                crate::kernel::error_from_response(
                    StatusCode::FORBIDDEN,
                    br#"{"code":"forbidden","message":"forbidden"}"#,
                ),
                &request,
            )
        };
        let error = explain(refused(), KeySource::Env);
        let text = error.to_string();
        assert!(text.contains("lacks scope `executions:write`"), "{text}");
        assert!(
            text.ends_with(
                "the key in REBUNO_API_KEY (which subagents also create their \
                                executions with)"
            ),
            "{text}"
        );
        assert_eq!(error.status(), Some(StatusCode::FORBIDDEN));
        assert_eq!(error.code(), Some("forbidden"));
        let text = explain(refused(), KeySource::Builder).to_string();
        assert!(text.ends_with("`ClientBuilder::api_key`"), "{text}");
    }

    #[test]
    fn other_errors_pass_unchanged() {
        let missing = crate::kernel::error_from_response(
            StatusCode::NOT_FOUND,
            br#"{"code":"not_found","message":"execution not found"}"#,
        );
        let error = explain(missing, KeySource::Env);
        assert_eq!(error.to_string(), "execution not found");
    }
}
