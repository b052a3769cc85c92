//! Agent registry: upsert, read, delete, metadata and policy bundles. With a data directory,
//! the store writes each change to `registry.jsonl` under its lock, before it answers.

use std::sync::Arc;

use rebuno::Secret;
use serde::Deserialize;
use serde_json::Value;

use super::Kernel;
use crate::error::KernelError;
use crate::model::AgentRow;
use crate::policy::Policy;
use crate::store::AgentEntry;

/// Smallest lease override honoured; smaller values are stored as unset.
const MIN_LEASE_SECONDS: u64 = 10;

/// `POST /v0/agents` body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentRequest {
    pub(crate) id: String,
    pub(crate) webhook_url: String,
    /// Optional, as in Go: missing or `null` is the empty secret (see [`Kernel::upsert_agent`]).
    #[serde(default = "no_secret", deserialize_with = "secret_or_null")]
    pub(crate) secret: Secret,
    #[serde(default)]
    pub(crate) lease_timeout_seconds: Option<i64>,
}

/// The secret of an agent registered without one.
fn no_secret() -> Secret {
    Secret::new("")
}

/// Reads `secret` as a string, `null` being the empty secret.
fn secret_or_null<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Secret, D::Error> {
    Ok(Option::<String>::deserialize(deserializer)?.map_or_else(no_secret, Secret::new))
}

/// `PUT /v0/agents/{id}/metadata` body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MetadataRequest {
    #[serde(default)]
    pub(crate) description: Option<String>,
    #[serde(default)]
    pub(crate) input_schema: Option<Value>,
    #[serde(default)]
    pub(crate) output_schema: Option<Value>,
}

impl Kernel {
    /// Registers or replaces an agent, keeping its policy and metadata when not re-supplied.
    ///
    /// The secret may be empty, as in Go (`TestRegisterAgentReturnsStoredAgent`), which
    /// generates none: webhooks to such an agent are then signed with the empty key, and its
    /// requests verify with that key, so anyone can sign them. A warning says so.
    pub(crate) fn upsert_agent(
        &self,
        request: AgentRequest,
        policy: Option<Arc<Policy>>,
    ) -> Result<AgentRow, KernelError> {
        if request.id.trim().is_empty() {
            return Err(KernelError::validation("id is required"));
        }
        if request.webhook_url.trim().is_empty() {
            return Err(KernelError::validation("webhook_url is required"));
        }
        if request.secret.is_empty() {
            tracing::warn!(
                agent = %request.id,
                "agent registered without a secret: its webhooks are signed with an empty key \
                 and anyone can sign its requests"
            );
        }
        let lease = request
            .lease_timeout_seconds
            .and_then(|s| u64::try_from(s).ok())
            .filter(|s| *s >= MIN_LEASE_SECONDS);
        let previous = self.store().agent(&request.id);
        let policy = policy.or_else(|| previous.as_ref().and_then(|p| p.policy.clone()));
        let agent = AgentRow {
            id: request.id,
            webhook_url: request.webhook_url,
            policy_bundle: policy.as_ref().map(|p| p.yaml().to_owned()),
            registered_at: self.clock().timestamp(),
            lease_timeout_seconds: lease,
            description: previous.as_ref().and_then(|p| p.agent.description.clone()),
            input_schema: previous.as_ref().and_then(|p| p.agent.input_schema.clone()),
            output_schema: previous
                .as_ref()
                .and_then(|p| p.agent.output_schema.clone()),
        };
        self.store().put_agent(AgentEntry {
            agent: agent.clone(),
            secret: request.secret,
            previous_secret: None,
            policy,
        });
        tracing::info!(agent = %agent.id, "agent registered");
        Ok(agent)
    }

    /// An agent by id.
    pub(crate) fn agent(&self, id: &str) -> Result<AgentRow, KernelError> {
        self.store()
            .agent(id)
            .map(|r| r.agent)
            .ok_or_else(|| KernelError::not_found("agent"))
    }

    /// All agents sorted by id.
    pub(crate) fn agents(&self) -> Vec<AgentRow> {
        self.store().agents()
    }

    /// Removes an agent (no error for unknown ids).
    pub(crate) fn delete_agent(&self, id: &str) {
        self.store().delete_agent(id);
    }

    /// Stores the metadata an agent publishes about itself.
    pub(crate) fn set_metadata(
        &self,
        id: &str,
        request: MetadataRequest,
    ) -> Result<(), KernelError> {
        let found = self.store().update_agent(id, |record| {
            record.agent.description = request.description;
            record.agent.input_schema = request.input_schema;
            record.agent.output_schema = request.output_schema;
        });
        if found {
            Ok(())
        } else {
            Err(KernelError::not_found("agent"))
        }
    }

    /// Starts signing webhooks with `secret`, and keeps accepting the agent's requests signed
    /// with the one it replaces until [`retire_previous_secret`](Self::retire_previous_secret).
    pub(crate) fn rotate_agent_secret(&self, id: &str, secret: Secret) -> Result<(), KernelError> {
        if secret.is_empty() {
            return Err(KernelError::validation("secret is required"));
        }
        let found = self.store().update_agent(id, |record| {
            let old = std::mem::replace(&mut record.secret, secret);
            record.previous_secret = Some(old);
        });
        if found {
            tracing::info!(
                agent = id,
                "agent secret rotated; the previous one is still accepted"
            );
            Ok(())
        } else {
            Err(KernelError::not_found("agent"))
        }
    }

    /// Stops accepting the secret a rotation replaced.
    pub(crate) fn retire_previous_secret(&self, id: &str) -> Result<(), KernelError> {
        if self
            .store()
            .update_agent(id, |record| record.previous_secret = None)
        {
            Ok(())
        } else {
            Err(KernelError::not_found("agent"))
        }
    }

    /// Compiles and stores an agent's policy bundle.
    pub(crate) fn set_policy(&self, id: &str, yaml: &str) -> Result<(), KernelError> {
        let policy = Policy::parse(yaml).map_err(|e| KernelError::validation(e.to_string()))?;
        let policy = Arc::new(policy);
        let found = self.store().update_agent(id, |record| {
            record.agent.policy_bundle = Some(policy.yaml().to_owned());
            record.policy = Some(policy.clone());
        });
        if found {
            Ok(())
        } else {
            Err(KernelError::not_found("agent"))
        }
    }
}
