//! The two HMAC-SHA256 signatures of the Rebuno protocol, as pure functions.
//!
//! * Kernel → agent webhooks carry `Rebuno-Signature: sha256=<hex>` over the raw body
//!   ([`sign_webhook`], [`verify_webhook`]).
//! * Agent → kernel requests carry `Rebuno-Signature: v1=<hex>` over a canonical string that binds
//!   the method, the request target, the timestamp and the dispatch lease ([`RequestSignature`]).
//!
//! No I/O and no clock: the caller supplies the timestamp. Comparisons are constant-time
//! (`Mac::verify_slice`).
//!
//! ```
//! use rebuno::{signing, Secret};
//!
//! let secret = Secret::new("dev-secret");
//! let body = br#"{"execution_id":"e"}"#;
//! let header = signing::sign_webhook(&secret, body);
//! assert!(signing::verify_webhook(&secret, body, Some(header.as_bytes())).is_ok());
//! assert!(signing::verify_webhook(&secret, b"tampered", Some(header.as_bytes())).is_err());
//! ```

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::Secret;

type HmacSha256 = Hmac<Sha256>;

/// Prefix of a webhook signature.
pub const WEBHOOK_PREFIX: &str = "sha256=";
/// Prefix of an agent request signature.
pub const REQUEST_PREFIX: &str = "v1=";
/// First line of the canonical string of an agent request signature.
const REQUEST_DOMAIN: &str = "rebuno-request-v1";

/// Why a signature was refused. Every variant maps to `401 Unauthorized`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// No `Rebuno-Signature` header.
    #[error("missing signature")]
    Missing,
    /// The header is not `<prefix><64 hex digits>`.
    #[error("malformed signature")]
    Malformed,
    /// The signature does not match the message.
    #[error("signature mismatch")]
    Mismatch,
}

/// Signs a webhook body: `sha256=` + lowercase hex HMAC-SHA256 of the raw body.
pub fn sign_webhook(secret: &Secret, body: &[u8]) -> String {
    let mut mac = keyed(secret);
    mac.update(body);
    format!("{WEBHOOK_PREFIX}{}", hex(&mac.finalize().into_bytes()))
}

/// Verifies a webhook's `Rebuno-Signature` header against the raw body in constant time.
///
/// # Errors
///
/// [`SignatureError`] when the header is missing, malformed or does not match.
pub fn verify_webhook(
    secret: &Secret,
    body: &[u8],
    header: Option<&[u8]>,
) -> Result<(), SignatureError> {
    let mut mac = keyed(secret);
    mac.update(body);
    check(mac, WEBHOOK_PREFIX, header)
}

/// The signed fields of an agent → kernel request (PROTOCOL.md §3.2).
///
/// `target` is the request target exactly as sent on the wire: the escaped path, plus `?` and
/// the raw query when there is one. `dispatch_id` and `attempt` are empty on reads.
///
/// ```
/// use rebuno::{signing::RequestSignature, Secret};
///
/// let sig = RequestSignature {
///     method: "GET",
///     target: "/v0/executions/alpha",
///     timestamp: "1700000000",
///     dispatch_id: "",
///     attempt: "",
/// };
/// assert_eq!(
///     sig.sign(&Secret::new("test-secret"), b""),
///     "v1=d0f262ef4226bcdf886ec35a7ce4cf77286055b563078faca8b307caa8ca5839"
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestSignature<'a> {
    /// HTTP method, e.g. `POST`.
    pub method: &'a str,
    /// Escaped path plus `?query` when present.
    pub target: &'a str,
    /// The `Rebuno-Timestamp` header value (decimal Unix seconds).
    pub timestamp: &'a str,
    /// The `Rebuno-Dispatch-Id` header value, or empty.
    pub dispatch_id: &'a str,
    /// The `Rebuno-Dispatch-Attempt` header value, or empty.
    pub attempt: &'a str,
}

impl RequestSignature<'_> {
    /// Computes the `v1=` signature of these fields and `body`.
    pub fn sign(&self, secret: &Secret, body: &[u8]) -> String {
        self.sign_keyed(&SigningKey::new(secret), body)
    }

    /// [`sign`](Self::sign) with a key whose HMAC pads were hashed once, ahead of time.
    pub(crate) fn sign_keyed(&self, key: &SigningKey, body: &[u8]) -> String {
        let digest = self.mac(key.0.clone(), body).finalize().into_bytes();
        let mut signature = String::with_capacity(REQUEST_PREFIX.len() + 2 * digest.len());
        signature.push_str(REQUEST_PREFIX);
        push_hex(&mut signature, &digest);
        signature
    }

    /// Verifies a `v1=` header value in constant time.
    ///
    /// # Errors
    ///
    /// [`SignatureError`] when the header is missing, malformed or does not match.
    pub fn verify(
        &self,
        secret: &Secret,
        body: &[u8],
        header: Option<&[u8]>,
    ) -> Result<(), SignatureError> {
        check(self.mac(keyed(secret), body), REQUEST_PREFIX, header)
    }

    fn mac(&self, mut mac: HmacSha256, body: &[u8]) -> HmacSha256 {
        for field in [
            REQUEST_DOMAIN,
            self.method,
            self.target,
            self.timestamp,
            self.dispatch_id,
            self.attempt,
        ] {
            mac.update(field.as_bytes());
            mac.update(b"\n");
        }
        mac.update(body);
        mac
    }
}

/// An HMAC-SHA256 key with its inner and outer pads already hashed: cloning it costs a copy of
/// two SHA-256 states instead of two compressions per signature.
#[derive(Clone)]
pub(crate) struct SigningKey(HmacSha256);

impl SigningKey {
    pub(crate) fn new(secret: &Secret) -> Self {
        Self(keyed(secret))
    }
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(..)")
    }
}

fn keyed(secret: &Secret) -> HmacSha256 {
    // HMAC accepts keys of any length, so this never fails.
    match HmacSha256::new_from_slice(secret.expose()) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC takes keys of any length"),
    }
}

fn check(mac: HmacSha256, prefix: &str, header: Option<&[u8]>) -> Result<(), SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?;
    let digits = header
        .strip_prefix(prefix.as_bytes())
        .ok_or(SignatureError::Malformed)?;
    let expected = unhex(digits).ok_or(SignatureError::Malformed)?;
    mac.verify_slice(&expected)
        .map_err(|_| SignatureError::Mismatch)
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    push_hex(&mut out, bytes);
    out
}

/// Appends the lowercase hex of `bytes` to `out`.
fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for byte in bytes {
        out.push(DIGITS[usize::from(byte >> 4)] as char);
        out.push(DIGITS[usize::from(byte & 0x0f)] as char);
    }
}

fn unhex(digits: &[u8]) -> Option<Vec<u8>> {
    if digits.len() != 64 {
        return None;
    }
    digits
        .chunks_exact(2)
        .map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect()
}

fn nibble(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
