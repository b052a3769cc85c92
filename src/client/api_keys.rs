//! Scoped API keys: [`Client::create_api_key`], [`Client::api_keys`],
//! [`Client::rotate_api_key`] and [`Client::revoke_api_key`].

use std::fmt;

use http::Method;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Client;
use crate::Secret;
use crate::error::Result;
use crate::kernel::{Replayable, encode_segment};

/// One permission an API key carries. Writing does not imply reading: a key that creates
/// executions and waits for them needs [`ExecutionsWrite`](Self::ExecutionsWrite) and
/// [`ExecutionsRead`](Self::ExecutionsRead).
///
/// ```
/// use rebuno::client::Scope;
/// assert_eq!(Scope::ExecutionsWrite.as_str(), "executions:write");
/// assert_eq!("agents:read".parse::<Scope>(), Ok(Scope::AgentsRead));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Scope {
    /// `executions:read`: get and list executions, their events, steps, fork points and
    /// live deltas, and `previous`.
    ExecutionsRead,
    /// `executions:write`: create, cancel and fork executions.
    ExecutionsWrite,
    /// `approvals:read`: list and get approvals.
    ApprovalsRead,
    /// `approvals:write`: grant and deny approvals.
    ApprovalsWrite,
    /// `agents:read`: list and get agents.
    AgentsRead,
    /// `agents:write`: register and delete agents.
    AgentsWrite,
    /// `policies:write`: set and test policy bundles, and fork under another bundle.
    PoliciesWrite,
    /// `api_keys:manage`: create, list, rotate and revoke API keys.
    ApiKeysManage,
    /// A scope this SDK does not know, by its wire name: read from a newer kernel, or
    /// granted to one.
    Unknown(String),
}

/// The scopes this SDK knows, with their wire names.
const KNOWN: [(Scope, &str); 8] = [
    (Scope::ExecutionsRead, "executions:read"),
    (Scope::ExecutionsWrite, "executions:write"),
    (Scope::ApprovalsRead, "approvals:read"),
    (Scope::ApprovalsWrite, "approvals:write"),
    (Scope::AgentsRead, "agents:read"),
    (Scope::AgentsWrite, "agents:write"),
    (Scope::PoliciesWrite, "policies:write"),
    (Scope::ApiKeysManage, "api_keys:manage"),
];

impl Scope {
    /// The scope as the kernel spells it, e.g. `executions:read`.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Unknown(name) => name,
            known => KNOWN
                .iter()
                .find(|(scope, _)| scope == known)
                .map_or("", |(_, name)| name),
        }
    }
}

impl std::str::FromStr for Scope {
    type Err = std::convert::Infallible;

    /// The scope named `text`; [`Scope::Unknown`] for a name this SDK does not know.
    fn from_str(text: &str) -> std::result::Result<Self, Self::Err> {
        Ok(KNOWN.iter().find(|(_, name)| *name == text).map_or_else(
            || Self::Unknown(text.to_owned()),
            |(scope, _)| scope.clone(),
        ))
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Scope {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Scope {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Ok(name
            .parse()
            .unwrap_or_else(|never: std::convert::Infallible| match never {}))
    }
}

/// An API key as the kernel lists it: never its token.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ApiKey {
    /// UUIDv7 id, for [`Client::rotate_api_key`] and [`Client::revoke_api_key`].
    pub id: String,
    /// The name it was created with.
    pub name: String,
    /// What it may do, sorted.
    #[serde(default)]
    pub scopes: Vec<Scope>,
    /// When it was created (RFC 3339).
    #[serde(default)]
    pub created_at: String,
    /// When it was revoked (RFC 3339), if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<String>,
}

/// A key with its bearer token, as creating or rotating it answers: the only time the kernel
/// shows the token (it keeps a digest). `Debug` never shows it.
///
/// ```no_run
/// # async fn demo(admin: rebuno::client::Client) -> rebuno::Result<()> {
/// use rebuno::client::{Client, Scope};
/// let issued = admin.create_api_key("ci").scope(Scope::ExecutionsRead).send().await?;
/// let ci = Client::builder().base_url("http://127.0.0.1:8080").api_key(issued.token).build()?;
/// # let _ = ci; Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[non_exhaustive]
pub struct IssuedApiKey {
    /// The key.
    #[serde(flatten)]
    pub key: ApiKey,
    /// Its bearer token (`rbk_<id>.<random>`), for [`ClientBuilder::api_key`](super::ClientBuilder::api_key).
    pub token: Secret,
}

impl Client {
    /// Starts creating an API key named `name` (1 to 200 characters); give it at least one
    /// [`CreateApiKey::scope`], then [`CreateApiKey::send`].
    pub fn create_api_key(&self, name: impl Into<String>) -> CreateApiKey {
        CreateApiKey {
            client: self.clone(),
            body: KeyRequest {
                name: name.into(),
                scopes: Vec::new(),
            },
        }
    }

    /// Every API key, oldest first, revoked ones included; no tokens.
    ///
    /// ```no_run
    /// # async fn demo(client: rebuno::client::Client) -> rebuno::Result<()> {
    /// for key in client.api_keys().await? {
    ///     println!("{} {} revoked: {}", key.id, key.name, key.revoked_at.is_some());
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `forbidden` for a key without `api_keys:manage`; network errors.
    pub async fn api_keys(&self) -> Result<Vec<ApiKey>> {
        self.read_list("/v0/api-keys").await
    }

    /// Gives a key a new token, keeping its id, name and scopes; the old token stops
    /// working at once.
    ///
    /// ```no_run
    /// # async fn demo(client: rebuno::client::Client, key_id: &str) -> rebuno::Result<()> {
    /// let rotated = client.rotate_api_key(key_id).await?;
    /// // Hand rotated.token to the key's user; the old token is refused from now on.
    /// # let _ = rotated; Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `conflict` for a revoked key; `not_found` for an unknown id; `validation_error` for an
    /// id that is not a UUID; `forbidden` without `api_keys:manage`; network errors.
    pub async fn rotate_api_key(&self, key_id: &str) -> Result<IssuedApiKey> {
        let path = format!("/v0/api-keys/{}/rotate", encode_segment(key_id));
        let answer = self
            .send(Method::POST, &path, None, Replayable::Yes)
            .await?;
        super::decode(answer.body())
    }

    /// Revokes a key: its token is refused from now on. Revoking again succeeds.
    ///
    /// ```no_run
    /// # async fn demo(client: rebuno::client::Client, key_id: &str) -> rebuno::Result<()> {
    /// client.revoke_api_key(key_id).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `not_found` for an unknown id; `validation_error` for an id that is not a UUID;
    /// `forbidden` without `api_keys:manage`; network errors.
    pub async fn revoke_api_key(&self, key_id: &str) -> Result<()> {
        let path = format!("/v0/api-keys/{}", encode_segment(key_id));
        self.send(Method::DELETE, &path, None, Replayable::Yes)
            .await
            .map(drop)
    }
}

/// An API key being created; finish with [`send`](Self::send). See [`Client::create_api_key`].
#[derive(Debug)]
#[must_use = "call `send()` to create the key"]
pub struct CreateApiKey {
    client: Client,
    body: KeyRequest,
}

/// The body of `POST /v0/api-keys`.
#[derive(Debug, Serialize)]
struct KeyRequest {
    name: String,
    scopes: Vec<Scope>,
}

impl CreateApiKey {
    /// Grants a scope (call once per scope; duplicates are merged).
    pub fn scope(mut self, scope: Scope) -> Self {
        self.body.scopes.push(scope);
        self
    }

    /// Creates the key and returns it with its token, shown this once.
    ///
    /// ```no_run
    /// # async fn demo(client: rebuno::client::Client) -> rebuno::Result<()> {
    /// use rebuno::client::Scope;
    /// let issued = client
    ///     .create_api_key("front-door")
    ///     .scope(Scope::ExecutionsWrite)
    ///     .scope(Scope::ExecutionsRead)
    ///     .send()
    ///     .await?;
    /// println!("created key {}", issued.key.id);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `validation_error` for a blank or too long name, no scope, or a scope the kernel does
    /// not know; `forbidden` without `api_keys:manage`; network errors.
    pub async fn send(self) -> Result<IssuedApiKey> {
        self.client.write("/v0/api-keys", &self.body).await
    }
}

#[cfg(test)]
mod tests {
    use http::StatusCode;

    use super::super::fake::FakeKernel;
    use super::*;

    #[test]
    fn scopes_round_trip_and_keep_unknown_names() {
        for (scope, name) in KNOWN {
            assert_eq!(serde_json::to_value(&scope).unwrap(), name);
            assert_eq!(serde_json::from_value::<Scope>(name.into()).unwrap(), scope);
        }
        let newer: Scope = serde_json::from_str(r#""audit:read""#).unwrap();
        assert_eq!(newer, Scope::Unknown("audit:read".to_owned()));
        assert_eq!(serde_json::to_string(&newer).unwrap(), r#""audit:read""#);
    }

    #[tokio::test]
    async fn an_issued_token_is_read_but_never_shown() {
        let body = r#"{"id":"k1","name":"ci","scopes":["agents:read"],"created_at":"t","token":"rbk_k1.s3cret"}"#;
        let kernel = FakeKernel::answering(StatusCode::CREATED, body);
        let issued = kernel
            .client()
            .create_api_key("ci")
            .scope(Scope::AgentsRead)
            .send()
            .await
            .unwrap();
        assert_eq!(issued.token.expose(), b"rbk_k1.s3cret");
        assert_eq!(issued.key.scopes, [Scope::AgentsRead]);
        assert!(!format!("{issued:?}").contains("s3cret"), "{issued:?}");
        let seen = kernel.requests();
        assert_eq!(seen, [("POST".to_owned(), "/v0/api-keys".to_owned(), true)]);
    }
}
