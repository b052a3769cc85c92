//! A shared secret that never shows itself.

use std::fmt;

/// An HMAC secret shared between an agent and the kernel.
///
/// `Debug` prints `Secret(** redacted **)`, and there is no `Display`, so the value cannot leak
/// into logs, spans or error messages by accident.
///
/// ```
/// let secret = rebuno::Secret::new("dev-secret");
/// assert_eq!(format!("{secret:?}"), "Secret(** redacted **)");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Box<[u8]>);

impl Secret {
    /// Wraps the secret's UTF-8 bytes.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into().into_bytes().into_boxed_slice())
    }

    /// The raw key bytes, for computing an HMAC.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    /// Whether the secret is empty (an empty secret is a configuration error).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(** redacted **)")
    }
}

/// Secrets deserialize from a JSON or YAML string (for configuration files). They never
/// serialize.
impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::new)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self::new(value)
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self::new(value)
    }
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn secrets_deserialize_but_never_print() {
        let secret: Secret = serde_json::from_str("\"s3cret-value\"").unwrap();
        assert_eq!(secret.expose(), b"s3cret-value");
        assert!(!format!("{secret:?}").contains("s3cret"));
    }
}
