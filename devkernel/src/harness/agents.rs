//! Registering agents and keys: [`DevKernel::register_agent`], secret rotation, policies and
//! API keys.

use std::sync::Arc;

use rebuno::client::AgentRecord;

use super::error::unknown_agent;
use super::{AgentSpec, DevKernel, DevKernelError, wire};
use crate::error::KernelError;
use crate::kernel::{AgentRequest, CreateKeyRequest, Kernel};
use crate::policy::Policy;

/// Registers `spec` with `kernel`, compiling its policy first.
pub(super) fn register(kernel: &Kernel, spec: AgentSpec) -> Result<AgentRecord, DevKernelError> {
    let policy = match &spec.policy_yaml {
        Some(yaml) => Some(Arc::new(Policy::parse(yaml)?)),
        None => None,
    };
    let request = AgentRequest {
        id: spec.id,
        webhook_url: spec.webhook_url,
        secret: spec.secret,
        lease_timeout_seconds: spec
            .lease_timeout_seconds
            .and_then(|s| i64::try_from(s).ok()),
    };
    Ok(wire::agent(kernel.upsert_agent(request, policy)?))
}

impl DevKernel {
    /// Registers (upserts) an agent, like `POST /v0/agents` (plus an optional policy).
    ///
    /// # Errors
    ///
    /// Validation errors (empty id, URL or secret) and policy compile errors.
    pub fn register_agent(&self, spec: AgentSpec) -> Result<AgentRecord, DevKernelError> {
        register(&self.kernel, spec)
    }

    /// Rotates an agent's secret without downtime: webhooks are signed with `secret` from now
    /// on, and the agent's requests are accepted with the new or the previous secret until
    /// [`retire_previous_secret`](Self::retire_previous_secret). Pair it with an agent built
    /// with `secret(new)` and `previous_secret(old)`.
    ///
    /// # Errors
    ///
    /// The agent is unknown, or `secret` is empty.
    pub fn rotate_secret(
        &self,
        agent_id: &str,
        secret: impl Into<String>,
    ) -> Result<(), DevKernelError> {
        self.kernel
            .rotate_agent_secret(agent_id, rebuno::Secret::new(secret.into()))
            .map_err(|e| self.unknown_agent(e, agent_id))
    }

    /// Ends a rotation: the secret [`rotate_secret`](Self::rotate_secret) replaced is no longer
    /// accepted.
    ///
    /// # Errors
    ///
    /// The agent is unknown.
    pub fn retire_previous_secret(&self, agent_id: &str) -> Result<(), DevKernelError> {
        self.kernel
            .retire_previous_secret(agent_id)
            .map_err(|e| self.unknown_agent(e, agent_id))
    }

    /// Replaces an agent's policy bundle, like `POST /v0/policies/{agent_id}`. As in the Go
    /// kernel, `default_action` is `deny` unless the bundle says `allow`: once an agent has a
    /// bundle, every tool and LLM call no rule matches is denied (`no explicit allow rule
    /// matched`); unmatched `local` steps are allowed.
    ///
    /// ```no_run
    /// # fn demo(kernel: rebuno_devkernel::DevKernel) -> Result<(), rebuno_devkernel::DevKernelError> {
    /// kernel.set_policy("triage", r#"
    /// default_action: allow   # else the agent's other tools and LLM calls are denied
    /// rules:
    ///   - { id: replies, when: { target: send_reply }, then: { decision: require_approval } }
    /// "#)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The bundle does not compile, or the agent is unknown.
    pub fn set_policy(&self, agent_id: &str, yaml: &str) -> Result<(), DevKernelError> {
        self.kernel
            .set_policy(agent_id, yaml)
            .map_err(|e| self.unknown_agent(e, agent_id))
    }

    /// Creates a scoped API key, like `POST /v0/api-keys`, and returns its bearer token
    /// (`rbk_…`), shown only here.
    ///
    /// # Errors
    ///
    /// Empty or overlong name, no scopes, or an unknown scope name.
    pub fn create_api_key(&self, name: &str, scopes: &[&str]) -> Result<String, DevKernelError> {
        let request = CreateKeyRequest {
            name: name.to_owned(),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        };
        Ok(self.kernel.create_api_key(request)?.1)
    }

    /// A kernel `not_found` about an agent, with its id and the registered agents.
    pub(super) fn unknown_agent(&self, error: KernelError, agent_id: &str) -> DevKernelError {
        let registered: Vec<String> = self.kernel.agents().into_iter().map(|a| a.id).collect();
        unknown_agent(error, agent_id, &registered)
    }
}
