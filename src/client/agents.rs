//! The agents registered with the kernel: [`Client::agents`], [`Client::agent`],
//! [`Client::register_agent`] and [`Client::delete_agent`].

use http::Method;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use super::Client;
use crate::Secret;
use crate::error::Result;
use crate::kernel::{Replayable, encode_segment};

/// An agent registered with the kernel, as `GET /v0/agents` reports it. The kernel never
/// returns the agent's webhook secret.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AgentRecord {
    /// The agent's id, as executions name it.
    pub id: String,
    /// Where the kernel sends the agent's dispatches.
    #[serde(default)]
    pub webhook_url: String,
    /// The policy bundle (YAML) the agent's steps are checked against, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_bundle: Option<String>,
    /// The agent's lease period in seconds, when it overrides the kernel's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_timeout_seconds: Option<u64>,
    /// The description the agent published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The JSON Schema of its input, as the agent published it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    /// The JSON Schema of its output, as the agent published it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// When it was registered (RFC 3339).
    #[serde(default)]
    pub registered_at: String,
}

impl Client {
    /// The agents registered with the kernel, sorted by id (`GET /v0/agents`).
    ///
    /// ```no_run
    /// # async fn demo(client: rebuno::client::Client) -> rebuno::Result<()> {
    /// for agent in client.agents().await? {
    ///     println!("{} -> {}", agent.id, agent.webhook_url);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Api`](crate::ErrorKind::Api) with code `forbidden` for a key without
    /// `agents:read`; network errors.
    pub async fn agents(&self) -> Result<Vec<AgentRecord>> {
        self.read_list("/v0/agents").await
    }

    /// One registered agent (`GET /v0/agents/{id}`), without its secret.
    ///
    /// ```no_run
    /// # async fn demo(client: rebuno::client::Client) -> rebuno::Result<()> {
    /// let agent = client.agent("researcher").await?;
    /// println!("{} has a policy: {}", agent.id, agent.policy_bundle.is_some());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `not_found` when no agent has this id; `forbidden` for a key without
    /// `agents:read`; network errors.
    pub async fn agent(&self, agent_id: &str) -> Result<AgentRecord> {
        let path = format!("/v0/agents/{}", encode_segment(agent_id));
        self.read(&path).await
    }

    /// Starts registering an agent, or replacing the registration of `agent_id` (its policy
    /// bundle and published metadata stay); finish with [`RegisterAgent::send`]. The kernel
    /// signs the webhooks it sends to `webhook_url` with `secret`, and the agent signs its
    /// requests with it (the kernel accepts an empty secret, but then anyone can sign them).
    ///
    /// ```no_run
    /// # async fn demo(client: rebuno::client::Client) -> rebuno::Result<()> {
    /// let secret = std::env::var("RESEARCHER_SECRET").unwrap_or_default();
    /// client
    ///     .register_agent("researcher", "https://agents.example.com/webhook", secret)
    ///     .lease_timeout_seconds(120)
    ///     .send()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn register_agent(
        &self,
        agent_id: impl Into<String>,
        webhook_url: impl Into<String>,
        secret: impl Into<Secret>,
    ) -> RegisterAgent {
        RegisterAgent {
            client: self.clone(),
            body: Registration {
                id: agent_id.into(),
                webhook_url: webhook_url.into(),
                secret: secret.into(),
                lease_timeout_seconds: None,
            },
        }
    }

    /// Removes an agent's registration (`DELETE /v0/agents/{id}`); removing an unknown agent
    /// succeeds too. Its executions stay, but the kernel can no longer deliver them.
    ///
    /// ```no_run
    /// # async fn demo(client: rebuno::client::Client) -> rebuno::Result<()> {
    /// client.delete_agent("researcher").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `forbidden` for a key without `agents:write`; network errors.
    pub async fn delete_agent(&self, agent_id: &str) -> Result<()> {
        let path = format!("/v0/agents/{}", encode_segment(agent_id));
        self.send(Method::DELETE, &path, None, Replayable::Yes)
            .await
            .map(drop)
    }
}

/// An agent registration being sent; finish with [`send`](Self::send). See
/// [`Client::register_agent`].
#[derive(Debug)]
#[must_use = "call `send()` to register the agent"]
pub struct RegisterAgent {
    client: Client,
    body: Registration,
}

/// The body of `POST /v0/agents`.
#[derive(Debug, Serialize)]
struct Registration {
    id: String,
    webhook_url: String,
    #[serde(serialize_with = "expose")]
    secret: Secret,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_timeout_seconds: Option<u64>,
}

/// Writes a secret into a request body (its only way out).
fn expose<S: Serializer>(secret: &Secret, serializer: S) -> std::result::Result<S::Ok, S::Error> {
    match std::str::from_utf8(secret.expose()) {
        Ok(text) => serializer.serialize_str(text),
        Err(_) => Err(serde::ser::Error::custom("the secret is not UTF-8")),
    }
}

impl RegisterAgent {
    /// How long a delivery's lease lasts before the kernel delivers the run again, in
    /// seconds, overriding the kernel's default; values below 10 keep the default.
    pub fn lease_timeout_seconds(mut self, seconds: u64) -> Self {
        self.body.lease_timeout_seconds = Some(seconds);
        self
    }

    /// Registers the agent and returns the registration as stored (without the secret).
    ///
    /// # Errors
    ///
    /// `validation_error` for a blank id or webhook URL; `forbidden` for a key without
    /// `agents:write`; network errors.
    pub async fn send(self) -> Result<AgentRecord> {
        self.client.write("/v0/agents", &self.body).await
    }
}

#[cfg(test)]
mod tests {
    use http::StatusCode;

    use super::super::fake::FakeKernel;
    use crate::ErrorKind;

    #[tokio::test]
    async fn agents_are_listed_with_the_bearer_token() {
        let body = r#"[{"id":"hello","webhook_url":"http://h/webhook","registered_at":"2026-01-01T00:00:00Z","lease_timeout_seconds":30,"future_field":1},{"id":"other"}]"#;
        let kernel = FakeKernel::answering(StatusCode::OK, body);
        let agents = kernel.client().agents().await.unwrap();
        let ids: Vec<&str> = agents.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(ids, ["hello", "other"]);
        assert_eq!(agents[0].lease_timeout_seconds, Some(30));
        assert_eq!(agents[1].webhook_url, "");
        let seen = kernel.requests();
        assert_eq!(seen, [("GET".to_owned(), "/v0/agents".to_owned(), true)]);
    }

    #[tokio::test]
    async fn no_agents_and_refusals() {
        let empty = FakeKernel::answering(StatusCode::OK, "null");
        assert!(empty.client().agents().await.unwrap().is_empty());
        let refused = FakeKernel::answering(
            StatusCode::FORBIDDEN,
            r#"{"code":"forbidden","message":"forbidden"}"#,
        );
        let error = refused.client().agents().await.unwrap_err();
        assert_eq!(
            (error.kind(), error.code(), error.status()),
            (
                ErrorKind::Api,
                Some("forbidden"),
                Some(StatusCode::FORBIDDEN)
            )
        );
    }
}
