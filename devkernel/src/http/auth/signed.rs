//! Agent authentication: v1 request signatures over the exact body (PROTOCOL.md §3.2) and
//! the dispatch lease headers of agent mutations.
//!
//! The body is read once, capped at [`body::MAX_BODY`], and verified against the signature
//! before any handler sees it; handlers decode the verified bytes afterwards, so a bad
//! signature is `401` and a malformed body `400`.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, RawPathParams, Request};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use rebuno::Secret;
use rebuno::signing::RequestSignature;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use super::super::error::ApiError;
use super::super::{body, parse_id};
use super::{AGENT_ID, SIGNATURE};
use crate::error::KernelError;
use crate::kernel::{Kernel, Principal};
use crate::store::Lease;

const TIMESTAMP: &str = "rebuno-timestamp";
const DISPATCH_ID: &str = "rebuno-dispatch-id";
const DISPATCH_ATTEMPT: &str = "rebuno-dispatch-attempt";
/// Allowed clock skew of `Rebuno-Timestamp`, inclusive.
const SKEW_SECONDS: i64 = 300;

/// A request signed by a registered agent, with the body its signature covers.
#[derive(Debug)]
pub(crate) struct Signed {
    /// The signing agent (`Principal::Agent`).
    pub(crate) principal: Principal,
    /// The verified body.
    pub(crate) body: Bytes,
}

impl Signed {
    /// Decodes the verified body strictly (`400 validation_error`).
    pub(crate) fn decode<T: DeserializeOwned>(&self) -> Result<T, KernelError> {
        body::decode(&self.body)
    }
}

impl FromRequest<Kernel> for Signed {
    type Rejection = ApiError;

    async fn from_request(request: Request, kernel: &Kernel) -> Result<Self, ApiError> {
        let (parts, raw) = request.into_parts();
        Ok(verify(kernel, &parts, raw).await?)
    }
}

/// A signed agent mutation, checked in the protocol's order: signature, execution id (the
/// route's `{id}`, `400` unless a UUID), lease headers (`400` when missing or malformed).
#[derive(Debug)]
pub(crate) struct Leased {
    /// The signing agent.
    pub(crate) principal: Principal,
    /// The execution in the path.
    pub(crate) id: Uuid,
    /// The lease the call carries.
    pub(crate) lease: Lease,
    /// The verified body.
    pub(crate) body: Bytes,
}

impl Leased {
    /// Decodes the verified body strictly (`400 validation_error`).
    pub(crate) fn decode<T: DeserializeOwned>(&self) -> Result<T, KernelError> {
        body::decode(&self.body)
    }
}

impl FromRequest<Kernel> for Leased {
    /// axum's own rejection for an undecodable path, else the protocol's envelope.
    type Rejection = Response;

    async fn from_request(request: Request, kernel: &Kernel) -> Result<Self, Response> {
        let (mut parts, raw) = request.into_parts();
        let params = RawPathParams::from_request_parts(&mut parts, kernel)
            .await
            .map_err(IntoResponse::into_response)?;
        let refuse = |error: KernelError| ApiError(error).into_response();
        let Signed { principal, body } = verify(kernel, &parts, raw).await.map_err(refuse)?;
        let id = params
            .iter()
            .find_map(|(name, value)| (name == "id").then_some(value))
            .unwrap_or_default();
        let id = parse_id(id).map_err(refuse)?;
        let lease = lease(&parts.headers).map_err(refuse)?;
        Ok(Self {
            principal,
            id,
            lease,
            body,
        })
    }
}

/// Verifies a v1 request signature over `raw`, with the agent's current or previous secret;
/// every failure is `401 unauthorized`, an oversized body included.
async fn verify(kernel: &Kernel, parts: &Parts, raw: Body) -> Result<Signed, KernelError> {
    let (agent_id, signature) = credentials(&parts.headers)?;
    let record = kernel
        .store()
        .agent(agent_id)
        .ok_or(KernelError::Unauthorized)?;
    let body = body::read(raw).await.ok_or(KernelError::Unauthorized)?;
    let fields = signed_fields(parts)?;
    let signed_with = |secret: &Secret| {
        fields
            .verify(secret, &body, Some(signature.as_bytes()))
            .is_ok()
    };
    if !signed_with(&record.secret) && !record.previous_secret.as_ref().is_some_and(signed_with) {
        return Err(KernelError::Unauthorized);
    }
    Ok(Signed {
        principal: Principal::Agent(agent_id.to_owned()),
        body,
    })
}

/// The non-empty `Rebuno-Agent-Id` and `Rebuno-Signature` headers.
fn credentials(headers: &HeaderMap) -> Result<(&str, &str), KernelError> {
    let agent_id = single(headers, AGENT_ID)?.filter(|v| !v.is_empty());
    let signature = single(headers, SIGNATURE)?.filter(|v| !v.is_empty());
    agent_id.zip(signature).ok_or(KernelError::Unauthorized)
}

/// The signed fields besides the body, once the timestamp is known to be fresh.
fn signed_fields(parts: &Parts) -> Result<RequestSignature<'_>, KernelError> {
    let headers = &parts.headers;
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
    Ok(RequestSignature {
        method: parts.method.as_str(),
        target,
        timestamp,
        dispatch_id,
        attempt,
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
fn lease(headers: &HeaderMap) -> Result<Lease, KernelError> {
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
