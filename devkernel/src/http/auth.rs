//! Authentication: bearer tokens for clients, v1 request signatures for agents (PROTOCOL.md
//! §2.2, §3.2), and the dispatch lease headers.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::Request;
use axum::http::HeaderMap;
use rebuno::Secret;
use rebuno::signing::RequestSignature;
use uuid::Uuid;

use super::body;
use crate::error::KernelError;
use crate::identity::constant_time_eq;
use crate::kernel::{Kernel, Lease, Principal, Scope};

const AGENT_ID: &str = "rebuno-agent-id";
const SIGNATURE: &str = "rebuno-signature";
const TIMESTAMP: &str = "rebuno-timestamp";
const DISPATCH_ID: &str = "rebuno-dispatch-id";
const DISPATCH_ATTEMPT: &str = "rebuno-dispatch-attempt";
/// Allowed clock skew of `Rebuno-Timestamp`, inclusive.
const SKEW_SECONDS: i64 = 300;

/// An authenticated request: who, its headers and its body.
#[derive(Debug)]
pub(crate) struct Authed {
    pub(crate) principal: Principal,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

/// Checks the bearer token: dev mode (no token configured) admits anonymous callers, but a
/// supplied `Authorization` header must still be valid.
pub(crate) fn bearer(kernel: &Kernel, headers: &HeaderMap) -> Result<Principal, KernelError> {
    let configured = kernel.config().bearer_token.as_deref();
    let Some(value) = headers.get(http::header::AUTHORIZATION) else {
        return match configured {
            None => Ok(Principal::Admin),
            Some(_) => Err(KernelError::Unauthorized),
        };
    };
    let supplied = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or(KernelError::Unauthorized)?;
    match configured {
        Some(token) if constant_time_eq(token.as_bytes(), supplied.as_bytes()) => {
            Ok(Principal::Admin)
        }
        _ => kernel
            .authenticate_key(supplied)
            .ok_or(KernelError::Unauthorized),
    }
}

/// A bearer-authenticated request holding `scope`, with its body (oversized bodies are
/// `400`).
pub(crate) async fn client(
    kernel: &Kernel,
    request: Request,
    scope: Scope,
) -> Result<Authed, KernelError> {
    let (parts, raw) = request.into_parts();
    let principal = bearer(kernel, &parts.headers)?;
    principal.require(scope)?;
    let body = body::read(raw)
        .await
        .ok_or_else(|| KernelError::validation("request body too large"))?;
    Ok(Authed {
        principal,
        headers: parts.headers,
        body,
    })
}

/// Whether a request presents agent credentials (dual-auth routes).
pub(crate) fn is_agent(headers: &HeaderMap) -> bool {
    headers.contains_key(AGENT_ID) || headers.contains_key(SIGNATURE)
}

/// HMAC when agent headers are present, else bearer with `executions:read`.
pub(crate) async fn dual(kernel: &Kernel, request: Request) -> Result<Authed, KernelError> {
    if is_agent(request.headers()) {
        agent(kernel, request).await
    } else {
        client(kernel, request, Scope::ExecutionsRead).await
    }
}

/// Verifies a v1 request signature; every failure is `401 unauthorized`.
/// A signed agent mutation: the call, the execution id in its path and the lease it carries.
pub(crate) struct Leased {
    pub(crate) call: Authed,
    pub(crate) id: Uuid,
    pub(crate) lease: Lease,
}

/// Checks an agent mutation in the protocol's order: signature, execution id, lease headers.
pub(crate) async fn leased(
    kernel: &Kernel,
    id: &str,
    request: Request,
) -> Result<Leased, KernelError> {
    let call = agent(kernel, request).await?;
    let id = super::parse_id(id)?;
    let lease = lease(&call.headers)?;
    Ok(Leased { call, id, lease })
}

pub(crate) async fn agent(kernel: &Kernel, request: Request) -> Result<Authed, KernelError> {
    let (parts, raw) = request.into_parts();
    let headers = &parts.headers;
    let agent_id = single(headers, AGENT_ID)?.filter(|v| !v.is_empty());
    let signature = single(headers, SIGNATURE)?.filter(|v| !v.is_empty());
    let (Some(agent_id), Some(signature)) = (agent_id, signature) else {
        return Err(KernelError::Unauthorized);
    };
    let record = kernel
        .store()
        .agent(agent_id)
        .ok_or(KernelError::Unauthorized)?;
    let body = body::read(raw).await.ok_or(KernelError::Unauthorized)?;
    let timestamp = single(headers, TIMESTAMP)?.unwrap_or_default();
    let dispatch_id = single(headers, DISPATCH_ID)?.unwrap_or_default();
    let attempt = single(headers, DISPATCH_ATTEMPT)?.unwrap_or_default();
    if !fresh(timestamp) {
        return Err(KernelError::Unauthorized);
    }
    let target = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path(), |pq| pq.as_str());
    let fields = RequestSignature {
        method: parts.method.as_str(),
        target,
        timestamp,
        dispatch_id,
        attempt,
    };
    let signed_with = |secret: &Secret| {
        fields
            .verify(secret, &body, Some(signature.as_bytes()))
            .is_ok()
    };
    if !signed_with(&record.secret) && !record.previous_secret.as_ref().is_some_and(signed_with) {
        return Err(KernelError::Unauthorized);
    }
    Ok(Authed {
        principal: Principal::Agent(agent_id.to_owned()),
        headers: parts.headers.clone(),
        body,
    })
}

/// A header that may appear at most once, without CR or LF.
fn single<'h>(headers: &'h HeaderMap, name: &str) -> Result<Option<&'h str>, KernelError> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(KernelError::Unauthorized);
    }
    let text = first.to_str().map_err(|_| KernelError::Unauthorized)?;
    if text.contains(['\r', '\n']) {
        return Err(KernelError::Unauthorized);
    }
    Ok(Some(text))
}

/// `Rebuno-Timestamp` is a base-10 integer within ±300 s of now.
fn fresh(timestamp: &str) -> bool {
    let Ok(ts) = timestamp.parse::<i64>() else {
        return false;
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    (now - SKEW_SECONDS..=now + SKEW_SECONDS).contains(&ts)
}

/// The lease headers of an agent mutation (`400` when missing or malformed).
pub(crate) fn lease(headers: &HeaderMap) -> Result<Lease, KernelError> {
    let dispatch_id = headers
        .get(DISPATCH_ID)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| Uuid::parse_str(v).ok())
        .ok_or_else(|| KernelError::validation("bad or missing Rebuno-Dispatch-Id"))?;
    let attempt = headers
        .get(DISPATCH_ATTEMPT)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|a| *a > 0)
        .ok_or_else(|| KernelError::validation("bad or missing Rebuno-Dispatch-Attempt"))?;
    Ok(Lease {
        dispatch_id,
        attempt,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_window_is_inclusive() {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap();
        assert!(fresh(&(now - 299).to_string()));
        assert!(fresh(&(now + 299).to_string()));
        assert!(!fresh(&(now - 302).to_string()));
        assert!(!fresh(&(now + 302).to_string()));
        assert!(!fresh(""));
        assert!(!fresh(&format!("{now}.0")));
    }
}
