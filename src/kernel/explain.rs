//! What a kernel error means for the call that got it, keyed on the call's route: the id a
//! `not_found` concerns (and that the kernel's retention may have deleted it), the scope a
//! `403 forbidden` lacks, the parent a continuation names.
//!
//! The kernel's envelopes say only `not found: execution` or `forbidden`; the request says which
//! execution, agent or approval, and its route which scope it needs (PROTOCOL.md §2.2, §2.5 to
//! §2.7; the dev kernel's `http/auth`, the Go kernel's `internal/api/auth.go`). Every message
//! names ids and scopes, never a request's other fields (an agent's registration carries its
//! secret). The kernel's own error stays the source.

use std::cell::OnceCell;

use bytes::Bytes;
use http::Method;
use serde_json::Value;

use super::base_url::decode_segment;
use crate::error::Error;

/// Where a retention deletion comes from, and how to keep executions longer: the Go kernel
/// deletes executions created before `now - REBUNO_RETENTION` (`Kernel.Cleanup`,
/// `internal/kernel/lifecycle.go`; 24 h by default, `internal/config/config.go`), the dev kernel
/// likewise (`DevKernelBuilder::execution_retention`, `REBUNO_RETENTION` for rebuno-dev).
const RETENTION: &str = "a kernel deletes an ended (completed, failed or cancelled) execution, \
     with the rest of its session, once it is older than the kernel's retention \
     (`REBUNO_RETENTION`, 24h by default; `DevKernelBuilder::execution_retention` for a dev \
     kernel)";

/// `error` explained for `request`, the request it answered; `error` itself when its route or
/// code has nothing to add.
pub(crate) fn explain(error: Error, request: &http::Request<Bytes>) -> Error {
    let Some(asked) = Asked::of(request) else {
        return error;
    };
    let message = match error.code() {
        Some("not_found") => not_found(&asked, error.message()),
        Some("conflict") => parent_gone(&asked, error.message()),
        Some("forbidden") => return forbidden(error, &asked),
        _ => None,
    };
    match message {
        Some(message) => error.explained(message),
        None => error,
    }
}

/// The parts of a request an explanation reads.
struct Asked<'a> {
    method: &'a Method,
    /// The path from `/v0/` on, as sent (query left out).
    path: &'a str,
    /// The segments after `v0`, percent-decoded.
    segments: Vec<String>,
    raw: &'a [u8],
    /// `raw` parsed, once a field is asked for.
    body: OnceCell<Value>,
    /// The agent that signed the request (`Rebuno-Agent-Id`), for an agent's own call.
    agent: Option<&'a str>,
}

impl<'a> Asked<'a> {
    fn of(request: &'a http::Request<Bytes>) -> Option<Self> {
        let full = request.uri().path();
        let path = &full[full.find("/v0/")?..];
        let segments = path["/v0/".len()..]
            .split('/')
            .map(decode_segment)
            .collect();
        let agent = request
            .headers()
            .get("Rebuno-Agent-Id")
            .and_then(|value| value.to_str().ok());
        Some(Self {
            method: request.method(),
            path,
            segments,
            raw: request.body(),
            body: OnceCell::new(),
            agent,
        })
    }

    /// `GET /v0/executions/…/previous`.
    fn call(&self) -> String {
        format!("`{} {}`", self.method, self.path)
    }

    fn segments(&self) -> Vec<&str> {
        self.segments.iter().map(String::as_str).collect()
    }

    /// A string field of the JSON body, `parent.child` for a nested one.
    fn field(&self, name: &str) -> Option<&str> {
        let mut at = self
            .body
            .get_or_init(|| serde_json::from_slice(self.raw).unwrap_or(Value::Null));
        for part in name.split('.') {
            at = at.get(part)?;
        }
        at.as_str().filter(|text| !text.is_empty())
    }
}

/// What a `404` is about: the execution (maybe deleted by retention), step, resource, agent,
/// approval or API key the call names.
fn not_found(asked: &Asked<'_>, kernel: &str) -> Option<String> {
    let call = asked.call();
    let says = |word: &str| kernel.to_ascii_lowercase().contains(word);
    let message = match asked.segments().as_slice() {
        ["executions"] if asked.method == Method::POST => {
            return created_for_nothing(asked, kernel);
        }
        ["executions", id, "steps", step, ..] if says("step") => {
            format!("execution {id} has no step {step} ({call}): check the step id")
        }
        ["executions", id, "resources", key, ..] if says("resource") && *key != "checkpoints" => {
            format!(
                "execution {id} has no resource {key:?} ({call}): register it (`resource(...)`) \
                 before binding it"
            )
        }
        ["executions", id, rest @ ..] => execution_gone(id, rest.first().copied(), &call),
        ["policies", _, "test"] if says("execution") => {
            let id = asked.field("execution_id").unwrap_or("named by the test");
            execution_gone(id, Some("test"), &call)
        }
        ["agents", id, ..] | ["policies", id, ..] => format!(
            "agent {id:?} is not registered with this kernel ({call}): check the agent id, or \
             register the agent first (`POST /v0/agents`, or the kernel's agent manifest)"
        ),
        ["approvals", id, ..] => format!(
            "approval {id} not found ({call}): check the id; an approval is deleted with its \
             execution: {RETENTION}"
        ),
        ["api-keys", id, ..] => format!(
            "API key {id} not found ({call}): list the keys (`GET /v0/api-keys`) for their ids"
        ),
        _ => return None,
    };
    Some(message)
}

/// A `404` of `POST /v0/executions`: the agent is not registered, or a subagent's parent is gone.
fn created_for_nothing(asked: &Asked<'_>, kernel: &str) -> Option<String> {
    let call = asked.call();
    let parent = asked.field("spawned_by.execution_id");
    match (parent, kernel.to_ascii_lowercase().contains("agent")) {
        (Some(parent), false) => Some(execution_gone(parent, Some("spawned_by"), &call)),
        _ => {
            let agent = asked.field("agent_id").unwrap_or_default();
            Some(format!(
                "agent {agent:?} is not registered with this kernel ({call}): check the agent id, \
                 or register the agent first (`POST /v0/agents`, or the kernel's agent manifest)"
            ))
        }
    }
}

/// An execution the kernel does not have, with what to do for the call `route` names
/// (`previous`, `fork`, ...).
fn execution_gone(id: &str, route: Option<&str>, call: &str) -> String {
    let advice = match route {
        Some("previous") => {
            "`previous()` reads the execution before this one in its session: continue in a \
             new session, or raise the retention so that sessions outlive their gaps"
        }
        Some("fork" | "fork-points") => {
            "Fork executions while the kernel still keeps them, or raise its retention to \
             keep the ones you will fork"
        }
        Some("spawned_by") => "A subagent's parent must still be running",
        Some("test") => "Test the policy against executions the kernel still keeps",
        _ => "Check the id",
    };
    format!(
        "execution {id} not found ({call}): the id is wrong, or the kernel's retention deleted \
         it: {RETENTION}. {advice}"
    )
}

/// A `409` of a continuation whose `parent_execution_id` the kernel does not have (the dev
/// kernel's `parent execution not found`).
fn parent_gone(asked: &Asked<'_>, kernel: &str) -> Option<String> {
    let continuation = asked.method == Method::POST && asked.segments() == ["executions"];
    let parent = asked.field("parent_execution_id")?;
    if !continuation || !kernel.contains("parent execution not found") {
        return None;
    }
    Some(format!(
        "parent execution {parent} not found ({}): the id is wrong, or the kernel's retention \
         deleted it: {RETENTION}. Continue from a turn the kernel still keeps, or start a new \
         session without `parent_execution_id`",
        asked.call()
    ))
}

/// A `403`: for an agent's call, an execution of another agent; for a bearer call, the scope
/// the key lacks (or, deciding an approval, a `decided_by` that is no approver).
fn forbidden(error: Error, asked: &Asked<'_>) -> Error {
    let call = asked.call();
    if let Some(agent) = asked.agent {
        let about = match asked.segments().as_slice() {
            ["executions", id, ..] => format!("execution {id} belongs to another agent"),
            _ => "the call concerns another agent".to_owned(),
        };
        return error.explained(format!(
            "{about} than {agent:?}, which signed it ({call}, 403 forbidden): an agent reaches \
             only itself and its own executions; check the id"
        ));
    }
    let scopes = scopes(asked);
    if scopes.is_empty() {
        return error;
    }
    let needs = quoted(&scopes);
    let create = format!(
        "create a key that has {} (`POST /v0/api-keys` with `\"scopes\": [{}]`) and use it, or \
         the kernel's bootstrap token",
        if scopes.len() == 1 { "it" } else { "them" },
        scopes
            .iter()
            .map(|scope| format!("\"{scope}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let message = match asked.segments().as_slice() {
        ["approvals", id, "grant" | "deny"] => format!(
            "the kernel refused to decide approval {id} ({call}, 403 forbidden): `decided_by` \
             {:?} is not one of the approval's approvers (`Approval::approvers`), or the API key \
             lacks scope {needs}; for the scope, {create}",
            asked.field("decided_by").unwrap_or_default()
        ),
        _ if scopes.len() > 1 => format!(
            "the API key lacks one of the scopes {needs}, which {call} needs all of (403 \
             forbidden): {create}"
        ),
        _ => {
            format!("the API key lacks scope {needs}, which {call} needs (403 forbidden): {create}")
        }
    };
    error.explained(message).with_scope(scopes.join(", "))
}

/// The scopes a bearer call needs (PROTOCOL.md §2.5 to §2.7; the dev kernel's `Caller<S>`
/// extractors): write never implies read.
fn scopes(asked: &Asked<'_>) -> Vec<&'static str> {
    let write = *asked.method != Method::GET;
    let pick = |read, written| vec![if write { written } else { read }];
    match asked.segments().as_slice() {
        ["executions", _, "fork"] if asked.field("policy_bundle").is_some() => {
            vec!["executions:write", "policies:write"]
        }
        ["executions", ..] => pick("executions:read", "executions:write"),
        ["approvals", ..] => pick("approvals:read", "approvals:write"),
        ["agents", _, "metadata"] => Vec::new(),
        ["agents", ..] => pick("agents:read", "agents:write"),
        ["policies", _, "test"] => vec!["policies:write", "executions:read"],
        ["policies", ..] => vec!["policies:write"],
        ["api-keys", ..] => vec!["api_keys:manage"],
        _ => Vec::new(),
    }
}

/// `` `a` `` or `` `a` and `b` ``.
fn quoted(scopes: &[&str]) -> String {
    scopes
        .iter()
        .map(|scope| format!("`{scope}`"))
        .collect::<Vec<_>>()
        .join(" and ")
}

#[cfg(test)]
mod tests {
    use http::StatusCode;

    use super::*;
    use crate::error::ErrorKind;
    use crate::kernel::error_from_response;

    const ID: &str = "0192f1a0-0000-7000-8000-000000000001";

    fn request(method: Method, path: &str, body: &str) -> http::Request<Bytes> {
        http::Request::builder()
            .method(method)
            .uri(format!("http://kernel:8080/prefix{path}"))
            .body(Bytes::from(body.to_owned()))
            .unwrap()
    }

    fn answer(status: StatusCode, code: &str, message: &str) -> Error {
        let body = serde_json::json!({ "code": code, "message": message }).to_string();
        error_from_response(status, body.as_bytes())
    }

    fn missing(message: &str) -> Error {
        answer(StatusCode::NOT_FOUND, "not_found", message)
    }

    #[test]
    fn a_404_of_previous_or_a_fork_names_the_execution_and_retention() {
        for (path, advice) in [
            (format!("/v0/executions/{ID}/previous"), "new session"),
            (format!("/v0/executions/{ID}/fork"), "raise its retention"),
        ] {
            let method = if path.ends_with("fork") {
                Method::POST
            } else {
                Method::GET
            };
            let asked = request(method, &path, "");
            let error = explain(missing("not found: execution"), &asked);
            let text = error.to_string();
            assert!(
                text.starts_with(&format!("execution {ID} not found")),
                "{text}"
            );
            assert!(
                text.contains("REBUNO_RETENTION") && text.contains(advice),
                "{text}"
            );
            assert!(text.contains("execution_retention"), "{text}");
            assert_eq!(error.code(), Some("not_found"));
            assert_eq!(error.status(), Some(StatusCode::NOT_FOUND));
            assert_eq!(error.kind(), ErrorKind::Api);
        }
    }

    #[test]
    fn a_404_names_the_agent_approval_or_key() {
        let create = request(Method::POST, "/v0/executions", r#"{"agent_id":"ghost"}"#);
        let text = explain(missing("not found: agent \"ghost\""), &create).to_string();
        assert!(
            text.starts_with("agent \"ghost\" is not registered"),
            "{text}"
        );
        let agent = request(Method::GET, "/v0/agents/a%20b", "");
        let text = explain(missing("not found: agent"), &agent).to_string();
        assert!(
            text.starts_with("agent \"a b\" is not registered"),
            "{text}"
        );
        let approval = request(Method::POST, "/v0/approvals/ap1/grant", "{}");
        let text = explain(missing("not found: approval"), &approval).to_string();
        assert!(text.starts_with("approval ap1 not found"), "{text}");
        let step = request(Method::GET, &format!("/v0/executions/{ID}/steps/s1"), "");
        let text = explain(missing("not found: step"), &step).to_string();
        assert!(
            text.starts_with(&format!("execution {ID} has no step s1")),
            "{text}"
        );
    }

    #[test]
    fn a_403_names_the_missing_scope_and_how_to_get_it() {
        let refused = || answer(StatusCode::FORBIDDEN, "forbidden", "forbidden");
        let create = request(Method::POST, "/v0/executions", r#"{"agent_id":"a"}"#);
        let error = explain(refused(), &create);
        let text = error.to_string();
        assert!(text.contains("lacks scope `executions:write`"), "{text}");
        assert!(text.contains(r#""scopes": ["executions:write"]"#), "{text}");
        assert_eq!(error.missing_scope(), Some("executions:write"));
        assert_eq!(error.code(), Some("forbidden"));
        let test = request(Method::POST, "/v0/policies/a/test", "{}");
        let text = explain(refused(), &test).to_string();
        assert!(
            text.contains("`policies:write` and `executions:read`"),
            "{text}"
        );
        let read = request(Method::GET, &format!("/v0/executions/{ID}/events"), "");
        assert_eq!(
            explain(refused(), &read).missing_scope(),
            Some("executions:read")
        );
        let grant = request(
            Method::POST,
            "/v0/approvals/ap1/grant",
            r#"{"decided_by":"bob"}"#,
        );
        let text = explain(refused(), &grant).to_string();
        assert!(
            text.contains("\"bob\" is not one of the approval's approvers"),
            "{text}"
        );
    }

    #[test]
    fn an_agents_403_is_about_ownership_not_scopes() {
        let mut signed = request(Method::GET, &format!("/v0/executions/{ID}"), "");
        signed
            .headers_mut()
            .insert("Rebuno-Agent-Id", http::HeaderValue::from_static("mine"));
        let error = explain(
            answer(StatusCode::FORBIDDEN, "forbidden", "forbidden"),
            &signed,
        );
        let text = error.to_string();
        assert!(
            text.contains("belongs to another agent than \"mine\""),
            "{text}"
        );
        assert_eq!(error.missing_scope(), None);
    }

    #[test]
    fn a_continuation_of_a_deleted_turn_names_the_parent() {
        let body = format!(r#"{{"agent_id":"chat","parent_execution_id":"{ID}"}}"#);
        let create = request(Method::POST, "/v0/executions", &body);
        let gone = answer(
            StatusCode::CONFLICT,
            "conflict",
            "conflict: parent execution not found",
        );
        let text = explain(gone, &create).to_string();
        assert!(
            text.starts_with(&format!("parent execution {ID} not found")),
            "{text}"
        );
        let busy = answer(StatusCode::CONFLICT, "conflict", "conflict: session in use");
        assert_eq!(
            explain(busy, &create).to_string(),
            "conflict: session in use"
        );
    }

    #[test]
    fn other_errors_pass_unchanged() {
        let asked = request(Method::GET, "/v1/elsewhere", "");
        assert_eq!(explain(missing("gone"), &asked).to_string(), "gone");
        let invalid = answer(StatusCode::BAD_REQUEST, "validation_error", "bad seq");
        let fork = request(Method::POST, &format!("/v0/executions/{ID}/fork"), "{}");
        assert_eq!(explain(invalid, &fork).to_string(), "bad seq");
    }
}
