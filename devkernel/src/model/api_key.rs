//! Scoped API keys (PROTOCOL.md §2.2, §2.7).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::Timestamp;

/// An API key as listed by `GET /v0/api-keys` (the token is never shown again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ApiKey {
    /// UUIDv7 id (also the token's `rbk_<id>` prefix).
    pub(crate) id: Uuid,
    /// Display name, 1–200 characters.
    pub(crate) name: String,
    /// Granted scopes, sorted and deduplicated.
    pub(crate) scopes: Vec<String>,
    /// Creation time.
    pub(crate) created_at: Timestamp,
    /// When it was revoked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) revoked_at: Option<Timestamp>,
}

/// The answer of create and rotate: the key plus its bearer token, shown once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct IssuedApiKey {
    /// The key.
    #[serde(flatten)]
    pub(crate) key: ApiKey,
    /// `rbk_<uuid>.<43 chars base64url>`.
    pub(crate) token: String,
}
