//! Identifiers and tokens in E2B's shapes: sandbox ids `i` + 20 characters of `[a-z0-9]`,
//! template (snapshot) ids of 20 such characters, envd access tokens.
//!
//! The randomness comes from the standard library's per-process random hashing keys: unique
//! and unpredictable enough for a local test server, not a cryptographic generator.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz1234567890";

fn next_random() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.finish()
}

/// `len` characters of `[a-z0-9]`.
pub(crate) fn random_chars(len: usize) -> String {
    let mut out = String::with_capacity(len);
    while out.len() < len {
        let mut word = next_random();
        for _ in 0..8 {
            if out.len() == len {
                break;
            }
            let index = usize::try_from(word % ALPHABET.len() as u64).unwrap_or(0);
            out.push(char::from(ALPHABET[index]));
            word /= ALPHABET.len() as u64;
        }
    }
    out
}

/// A new sandbox id (`i` + 20 characters, like the API's).
pub(crate) fn sandbox_id() -> String {
    format!("i{}", random_chars(20))
}

/// A new template id (20 characters), the id of a snapshot's template.
pub(crate) fn template_id() -> String {
    random_chars(20)
}

/// A new envd access token.
pub(crate) fn access_token() -> String {
    format!("ea_{}", random_chars(40))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_the_api_shape_and_differ() {
        let a = sandbox_id();
        let b = sandbox_id();
        assert_eq!(a.len(), 21);
        assert!(a.starts_with('i'));
        assert!(a.bytes().all(|c| ALPHABET.contains(&c)));
        assert_ne!(a, b);
        assert_eq!(template_id().len(), 20);
    }
}
