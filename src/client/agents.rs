//! The agents registered with the kernel: [`Client::agents`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Client;
use crate::error::Result;

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
