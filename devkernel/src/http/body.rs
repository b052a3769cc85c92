//! Request bodies as extractors: the 10 MiB cap and strict JSON decoding.
//!
//! [`Strict<T>`] reads and decodes in one go; [`Capped`] only reads, for handlers that check
//! the path id or a second scope before decoding (the order the protocol's errors follow).
//! Both answer `400 validation_error`. Agent routes read their body while verifying its
//! signature instead (`auth::Signed`).

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;

use super::error::ApiError;
use crate::error::KernelError;

/// Largest accepted request body.
pub(crate) const MAX_BODY: usize = 10 * 1024 * 1024;

/// Reads a whole body, refusing more than [`MAX_BODY`] bytes.
pub(crate) async fn read(body: Body) -> Option<Bytes> {
    axum::body::to_bytes(body, MAX_BODY).await.ok()
}

/// Decodes the first JSON value of `bytes` strictly (unknown fields are errors), like Go's
/// `json.Decoder` with `DisallowUnknownFields`.
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, KernelError> {
    let mut stream = serde_json::Deserializer::from_slice(bytes).into_iter::<T>();
    match stream.next() {
        Some(Ok(value)) => Ok(value),
        _ => Err(KernelError::validation("")),
    }
}

/// A body of at most [`MAX_BODY`] bytes, not yet decoded (`400` when larger).
#[derive(Debug)]
pub(crate) struct Capped(pub(crate) Bytes);

impl Capped {
    /// Whether the body is empty or only whitespace.
    pub(crate) fn is_blank(&self) -> bool {
        self.0.iter().all(u8::is_ascii_whitespace)
    }

    /// Decodes the body strictly (`400 validation_error`).
    pub(crate) fn decode<T: DeserializeOwned>(&self) -> Result<T, KernelError> {
        decode(&self.0)
    }
}

impl<S: Sync> FromRequest<S> for Capped {
    type Rejection = ApiError;

    async fn from_request(request: Request, _: &S) -> Result<Self, ApiError> {
        let bytes = read(request.into_body())
            .await
            .ok_or_else(|| KernelError::validation("request body too large"))?;
        Ok(Self(bytes))
    }
}

/// A JSON body decoded strictly into `T` (`400` when oversized or malformed).
#[derive(Debug)]
pub(crate) struct Strict<T>(pub(crate) T);

impl<S: Sync, T: DeserializeOwned> FromRequest<S> for Strict<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let body = Capped::from_request(request, state).await?;
        Ok(Self(body.decode()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body {
        #[allow(dead_code)]
        a: u32,
    }

    #[test]
    fn strict_first_value() {
        assert!(decode::<Body>(br#"{"a":1} trailing"#).is_ok());
        assert!(decode::<Body>(br#"{"a":1,"b":2}"#).is_err());
        assert!(decode::<Body>(br#"{"a":"x"}"#).is_err());
        assert!(decode::<Body>(b"").is_err());
    }

    #[test]
    fn blank_bodies() {
        assert!(Capped(Bytes::from_static(b" \n\t")).is_blank());
        assert!(Capped(Bytes::new()).is_blank());
        assert!(!Capped(Bytes::from_static(b" {}")).is_blank());
    }
}
