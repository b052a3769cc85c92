//! API key tokens: `rbk_<uuid>.<base64url-nopad(32 random bytes)>`, stored as a SHA-256.

use uuid::Uuid;

use crate::error::KernelError;
use crate::identity;

const PREFIX: &str = "rbk_";
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Unpadded URL-safe base64.
pub(crate) fn base64url(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

/// A fresh token for key `id`.
pub(crate) fn issue(id: Uuid) -> Result<String, KernelError> {
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|e| KernelError::Internal(format!("random: {e}")))?;
    Ok(format!("{PREFIX}{id}.{}", base64url(&secret)))
}

/// The stored digest of a token.
pub(crate) fn digest(token: &str) -> String {
    identity::sha256_hex(token.as_bytes())
}

/// The key id a token names, if it has the token shape.
pub(crate) fn key_id(token: &str) -> Option<Uuid> {
    let (id, secret) = token.strip_prefix(PREFIX)?.split_once('.')?;
    if secret.len() != 43 {
        return None;
    }
    Uuid::parse_str(id).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_matches_rfc4648() {
        assert_eq!(base64url(b""), "");
        assert_eq!(base64url(b"f"), "Zg");
        assert_eq!(base64url(b"fo"), "Zm8");
        assert_eq!(base64url(b"foo"), "Zm9v");
        assert_eq!(base64url(&[0xfb, 0xff]), "-_8");
        assert_eq!(base64url(&[0u8; 32]).len(), 43);
    }

    #[test]
    fn tokens_name_their_key() {
        let id = Uuid::now_v7();
        let token = issue(id).unwrap();
        assert!(token.starts_with(&format!("rbk_{id}.")));
        assert_eq!(key_id(&token), Some(id));
        assert_eq!(key_id("rbk_nope.x"), None);
        assert_ne!(issue(id).unwrap(), token);
    }
}
