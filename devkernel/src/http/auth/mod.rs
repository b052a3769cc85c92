//! Authentication as extractors (PROTOCOL.md §2.2, §3.2): handlers name the caller they
//! accept in their signatures.
//!
//! * [`Caller<S>`]: a bearer caller (the admin token, a scoped API key, or anyone in dev
//!   mode) holding scope `S`, one of the markers in [`scope`].
//! * [`Signed`]: a registered agent's v1-signed request, with the body the signature covers.
//! * [`Leased`]: a signed agent mutation with its execution id and dispatch lease.
//! * [`Reader`]: a dual-auth read, a signed agent or a caller holding `executions:read`.
//! * [`NotAgent`]: refuses agent credentials on a route only clients may call.
//!
//! Bad credentials are the protocol's `401 unauthorized` envelope, a missing scope
//! `403 forbidden`.

mod signed;

use std::fmt;
use std::marker::PhantomData;

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use rebuno::client::Scope;

pub(crate) use self::signed::{Leased, Signed};
use super::error::ApiError;
use crate::error::KernelError;
use crate::identity::constant_time_eq;
use crate::kernel::{Kernel, Principal};

/// Header naming the signing agent.
const AGENT_ID: &str = "rebuno-agent-id";
/// Header carrying the v1 signature.
const SIGNATURE: &str = "rebuno-signature";

/// A scope a route requires, named by one of the marker types in [`scope`].
pub(crate) trait Required {
    /// The scope the caller must hold.
    const SCOPE: Scope;
}

/// Marker types for [`Caller`]'s scope parameter, one per API key scope.
pub(crate) mod scope {
    use super::{Required, Scope};

    /// Declares an uninhabited marker type per scope variant.
    macro_rules! markers {
        ($($name:ident),* $(,)?) => {$(
            #[doc = concat!("The caller must hold `Scope::", stringify!($name), "`.")]
            #[derive(Debug)]
            pub(crate) enum $name {}

            impl Required for $name {
                const SCOPE: Scope = Scope::$name;
            }
        )*};
    }

    markers!(
        ExecutionsRead,
        ExecutionsWrite,
        ApprovalsRead,
        ApprovalsWrite,
        AgentsRead,
        AgentsWrite,
        PoliciesWrite,
        ApiKeysManage,
    );
}

/// A bearer-authenticated client holding scope `S`.
pub(crate) struct Caller<S> {
    /// Who is calling.
    pub(crate) principal: Principal,
    /// The scope checked (`fn() -> S` keeps `Caller` `Send` and `Sync` for any marker).
    scope: PhantomData<fn() -> S>,
}

impl<S> fmt::Debug for Caller<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Caller")
            .field("principal", &self.principal)
            .finish()
    }
}

impl<S: Required> FromRequestParts<Kernel> for Caller<S> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, kernel: &Kernel) -> Result<Self, ApiError> {
        let principal = bearer(kernel, &parts.headers)?;
        principal.require(S::SCOPE)?;
        Ok(Self {
            principal,
            scope: PhantomData,
        })
    }
}

/// Checks the bearer token: dev mode (no token configured) admits anonymous callers, but a
/// supplied `Authorization` header must still be valid.
fn bearer(kernel: &Kernel, headers: &HeaderMap) -> Result<Principal, KernelError> {
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

/// Whether a request presents agent credentials (dual-auth routes).
fn is_agent(headers: &HeaderMap) -> bool {
    headers.contains_key(AGENT_ID) || headers.contains_key(SIGNATURE)
}

/// Refuses agent credentials (`401`) on a route only clients may call, before any bearer
/// check; put it ahead of the route's [`Caller`].
#[derive(Debug)]
pub(crate) struct NotAgent;

impl<S: Sync> FromRequestParts<S> for NotAgent {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        if is_agent(&parts.headers) {
            return Err(KernelError::Unauthorized.into());
        }
        Ok(Self)
    }
}

/// A dual-auth read: a [`Signed`] agent when agent headers are present, else a [`Caller`]
/// holding `executions:read`. The kernel then checks the agent owns what it reads.
#[derive(Debug)]
pub(crate) struct Reader {
    /// Who is reading.
    pub(crate) principal: Principal,
}

impl FromRequest<Kernel> for Reader {
    type Rejection = ApiError;

    async fn from_request(request: Request, kernel: &Kernel) -> Result<Self, ApiError> {
        let principal = if is_agent(request.headers()) {
            Signed::from_request(request, kernel).await?.principal
        } else {
            let (mut parts, _) = request.into_parts();
            Caller::<scope::ExecutionsRead>::from_request_parts(&mut parts, kernel)
                .await?
                .principal
        };
        Ok(Self { principal })
    }
}

#[cfg(test)]
mod tests;
