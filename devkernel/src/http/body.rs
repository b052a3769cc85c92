//! Request bodies: the 10 MiB cap and strict JSON decoding.

use axum::body::{Body, Bytes};
use serde::de::DeserializeOwned;

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
}
