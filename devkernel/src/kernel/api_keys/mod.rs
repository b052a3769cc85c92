//! Scoped API keys (PROTOCOL.md §2.2, §2.7): create, list, rotate, revoke, authenticate.
//!
//! With a data directory, every change to a key is written to the registry (the key and its
//! token's digest, never the token) under the key table's lock, before the change answers.

mod scope;
mod token;

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Deserialize;
use uuid::Uuid;

use super::{Kernel, Principal};
use crate::error::KernelError;
use crate::model::{ApiKey, IssuedApiKey};
use crate::store::{StoredKey, lock};

pub(crate) use scope::Scope;

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

#[derive(Debug, Clone)]
struct Record {
    key: ApiKey,
    digest: String,
    scopes: Vec<Scope>,
}

impl Record {
    /// A key the registry kept.
    fn restored(stored: StoredKey) -> Self {
        let scopes = stored
            .key
            .scopes
            .iter()
            .filter_map(|name| {
                let scope = Scope::parse(name);
                if scope.is_none() {
                    tracing::warn!(key = %stored.key.id, scope = %name, "unknown stored scope dropped");
                }
                scope
            })
            .collect();
        Self {
            key: stored.key,
            digest: stored.digest,
            scopes,
        }
    }
}

/// The key table.
#[derive(Debug, Default)]
pub(crate) struct Keys {
    keys: Mutex<BTreeMap<Uuid, Record>>,
}

impl Keys {
    /// A table holding the keys a registry kept.
    pub(crate) fn new(stored: Vec<StoredKey>) -> Self {
        let keys = stored
            .into_iter()
            .map(|stored| (stored.key.id, Record::restored(stored)));
        Self {
            keys: Mutex::new(keys.collect()),
        }
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
        .map(|s| {
            Scope::parse(s).ok_or_else(|| KernelError::validation(format!("unknown scope {s:?}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if scopes.is_empty() {
        return Err(KernelError::validation("scopes are required"));
    }
    scopes.sort_by_key(|s| s.as_str());
    scopes.dedup();
    Ok((name, scopes))
}

impl Kernel {
    /// Creates a key and returns it with its token (shown once).
    pub(crate) fn create_api_key(
        &self,
        request: CreateKeyRequest,
    ) -> Result<IssuedApiKey, KernelError> {
        let (name, scopes) = validate(request)?;
        let id = Uuid::now_v7();
        let token = token::issue(id)?;
        let key = ApiKey {
            id,
            name,
            scopes: scopes.iter().map(|s| s.as_str().to_owned()).collect(),
            created_at: self.clock().timestamp(),
            revoked_at: None,
        };
        let record = Record {
            key: key.clone(),
            digest: token::digest(&token),
            scopes,
        };
        let mut keys = lock(&self.keys().keys);
        self.persist_key(&record);
        keys.insert(id, record);
        drop(keys);
        tracing::info!(key = %id, "api key created");
        Ok(IssuedApiKey { key, token })
    }

    /// Every key, oldest first, without tokens.
    pub(crate) fn api_keys(&self) -> Vec<ApiKey> {
        lock(&self.keys().keys)
            .values()
            .map(|r| r.key.clone())
            .collect()
    }

    /// Replaces a live key's token (`409` when revoked).
    pub(crate) fn rotate_api_key(&self, id: Uuid) -> Result<IssuedApiKey, KernelError> {
        let mut keys = lock(&self.keys().keys);
        let record = keys
            .get_mut(&id)
            .ok_or_else(|| KernelError::not_found("api key"))?;
        if record.key.revoked_at.is_some() {
            return Err(KernelError::conflict("api key is revoked"));
        }
        let token = token::issue(id)?;
        record.digest = token::digest(&token);
        self.persist_key(record);
        tracing::info!(key = %id, "api key rotated");
        Ok(IssuedApiKey {
            key: record.key.clone(),
            token,
        })
    }

    /// Revokes a key (repeatable).
    pub(crate) fn revoke_api_key(&self, id: Uuid) -> Result<(), KernelError> {
        let mut keys = lock(&self.keys().keys);
        let record = keys
            .get_mut(&id)
            .ok_or_else(|| KernelError::not_found("api key"))?;
        if record.key.revoked_at.is_none() {
            record.key.revoked_at = Some(self.clock().timestamp());
            self.persist_key(record);
            tracing::info!(key = %id, "api key revoked");
        }
        Ok(())
    }

    /// Writes a key's state to the registry, with a data directory (call with the key table
    /// locked, so the registry's order is the order of the changes).
    fn persist_key(&self, record: &Record) {
        if let Some(registry) = self.store().registry() {
            registry.api_key(&record.key, &record.digest);
        }
    }

    /// The principal of a live key's token.
    pub(crate) fn authenticate_key(&self, token: &str) -> Option<Principal> {
        let id = token::key_id(token)?;
        let keys = lock(&self.keys().keys);
        let record = keys.get(&id)?;
        let digest = token::digest(token);
        let matches =
            crate::identity::constant_time_eq(digest.as_bytes(), record.digest.as_bytes());
        (matches && record.key.revoked_at.is_none()).then(|| {
            Principal::Key(KeyGrant {
                id,
                scopes: record.scopes.clone(),
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
