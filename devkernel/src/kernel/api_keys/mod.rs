//! Scoped API keys (PROTOCOL.md §2.2, §2.7): create, list, rotate, revoke, authenticate.
//!
//! With a data directory, every change to a key is written to the registry (the key and its
//! token's digest, never the token) under the key table's lock, before the change answers.

mod token;

use std::collections::BTreeMap;
use std::sync::Mutex;

use rebuno::client::{ApiKey, Scope};
use serde::Deserialize;
use uuid::Uuid;

use super::{Kernel, Principal};
use crate::error::KernelError;
use crate::store::{KeyRow, lock};

/// Longest key name, in characters.
const MAX_NAME: usize = 200;

/// `POST /v0/api-keys` body.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateKeyRequest {
    #[serde(default)]
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) scopes: Vec<String>,
}

/// What an authenticated API key may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyGrant {
    /// The key id.
    pub(crate) id: Uuid,
    /// Its scopes.
    pub(crate) scopes: Vec<Scope>,
}

/// The key table.
#[derive(Debug, Default)]
pub(crate) struct Keys {
    keys: Mutex<BTreeMap<Uuid, KeyRow>>,
}

impl Keys {
    /// A table holding the keys a registry kept (a stored scope this kernel does not know
    /// grants nothing).
    pub(crate) fn new(stored: BTreeMap<Uuid, KeyRow>) -> Self {
        for row in stored.values() {
            let unknown = row
                .key
                .scopes
                .iter()
                .filter(|s| matches!(s, Scope::Unknown(_)));
            for scope in unknown {
                tracing::warn!(key = %row.key.id, %scope, "unknown stored scope dropped");
            }
        }
        Self {
            keys: Mutex::new(stored),
        }
    }
}

/// The scope named `name`, if this kernel knows it.
fn known(name: &str) -> Option<Scope> {
    match name.parse() {
        Ok(Scope::Unknown(_)) => None,
        Ok(scope) => Some(scope),
        Err(never) => match never {},
    }
}

/// Trimmed name of 1–200 characters; scopes known, non-empty, sorted, deduplicated.
fn validate(request: CreateKeyRequest) -> Result<(String, Vec<Scope>), KernelError> {
    let name = request.name.trim().to_owned();
    if name.is_empty() || name.chars().count() > MAX_NAME {
        return Err(KernelError::validation("name must be 1-200 characters"));
    }
    let mut scopes = request
        .scopes
        .iter()
        .map(|s| known(s).ok_or_else(|| KernelError::validation(format!("unknown scope {s:?}"))))
        .collect::<Result<Vec<_>, _>>()?;
    if scopes.is_empty() {
        return Err(KernelError::validation("scopes are required"));
    }
    scopes.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    scopes.dedup();
    Ok((name, scopes))
}

impl Kernel {
    /// Creates a key and returns it with its token (shown once).
    pub(crate) fn create_api_key(
        &self,
        request: CreateKeyRequest,
    ) -> Result<(ApiKey, String), KernelError> {
        let (name, scopes) = validate(request)?;
        let id = Uuid::now_v7();
        let token = token::issue(id)?;
        let mut key = ApiKey::default();
        key.id = id.to_string();
        key.name = name;
        key.scopes = scopes;
        key.created_at = self.clock().timestamp().to_string();
        let row = KeyRow {
            key: key.clone(),
            digest: token::digest(&token),
        };
        let mut keys = lock(&self.keys().keys);
        self.persist_key(&row);
        keys.insert(id, row);
        drop(keys);
        tracing::info!(key = %id, "api key created");
        Ok((key, token))
    }

    /// Every key, oldest first, without tokens.
    pub(crate) fn api_keys(&self) -> Vec<ApiKey> {
        lock(&self.keys().keys)
            .values()
            .map(|row| row.key.clone())
            .collect()
    }

    /// Replaces a live key's token (`409` when revoked).
    pub(crate) fn rotate_api_key(&self, id: Uuid) -> Result<(ApiKey, String), KernelError> {
        let mut keys = lock(&self.keys().keys);
        let row = keys
            .get_mut(&id)
            .ok_or_else(|| KernelError::not_found("api key"))?;
        if row.key.revoked_at.is_some() {
            return Err(KernelError::conflict("api key is revoked"));
        }
        let token = token::issue(id)?;
        row.digest = token::digest(&token);
        self.persist_key(row);
        tracing::info!(key = %id, "api key rotated");
        Ok((row.key.clone(), token))
    }

    /// Revokes a key (repeatable).
    pub(crate) fn revoke_api_key(&self, id: Uuid) -> Result<(), KernelError> {
        let mut keys = lock(&self.keys().keys);
        let row = keys
            .get_mut(&id)
            .ok_or_else(|| KernelError::not_found("api key"))?;
        if row.key.revoked_at.is_none() {
            row.key.revoked_at = Some(self.clock().timestamp().to_string());
            self.persist_key(row);
            tracing::info!(key = %id, "api key revoked");
        }
        Ok(())
    }

    /// Writes a key's state to the registry, with a data directory (call with the key table
    /// locked, so the registry's order is the order of the changes).
    fn persist_key(&self, row: &KeyRow) {
        if let Some(registry) = self.store().registry() {
            registry.api_key(row);
        }
    }

    /// The principal of a live key's token.
    pub(crate) fn authenticate_key(&self, token: &str) -> Option<Principal> {
        let id = token::key_id(token)?;
        let keys = lock(&self.keys().keys);
        let row = keys.get(&id)?;
        let digest = token::digest(token);
        let matches = crate::identity::constant_time_eq(digest.as_bytes(), row.digest.as_bytes());
        (matches && row.key.revoked_at.is_none()).then(|| {
            Principal::Key(KeyGrant {
                id,
                scopes: row.key.scopes.clone(),
            })
        })
    }
}

impl Principal {
    /// Whether this caller holds `scope` (the bootstrap token and dev callers hold all).
    pub(crate) fn allows(&self, scope: Scope) -> bool {
        match self {
            Self::Admin => true,
            Self::Agent(_) => false,
            Self::Key(grant) => grant.scopes.contains(&scope),
        }
    }

    /// `403 forbidden` unless this caller holds `scope`.
    pub(crate) fn require(&self, scope: Scope) -> Result<(), KernelError> {
        if self.allows(scope) {
            Ok(())
        } else {
            Err(KernelError::Forbidden)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(name: &str, scopes: &[&str]) -> CreateKeyRequest {
        CreateKeyRequest {
            name: name.into(),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn validation() {
        let (name, scopes) = validate(request(
            " ci ",
            &["executions:write", "executions:read", "executions:read"],
        ))
        .unwrap();
        assert_eq!(name, "ci");
        assert_eq!(scopes, vec![Scope::ExecutionsRead, Scope::ExecutionsWrite]);
        assert!(validate(request("  ", &["executions:read"])).is_err());
        assert!(validate(request(&"n".repeat(201), &["executions:read"])).is_err());
        assert!(validate(request("ci", &[])).is_err());
        assert!(validate(request("ci", &["root"])).is_err());
    }
}
