//! [`AgentSpec`]: an agent registration, as a test or a manifest gives it.

/// An agent registration: the body of `POST /v0/agents` plus an optional policy bundle.
///
/// ```
/// use rebuno_devkernel::AgentSpec;
/// let spec = AgentSpec::new("hello", "http://127.0.0.1:5000/webhook", "dev-secret")
///     .lease_timeout_seconds(30)
///     .policy_yaml("default_action: allow");
/// # let _ = spec;
/// ```
#[derive(Debug, Clone)]
pub struct AgentSpec {
    pub(crate) id: String,
    pub(crate) webhook_url: String,
    pub(crate) secret: rebuno::Secret,
    pub(crate) lease_timeout_seconds: Option<u64>,
    pub(crate) policy_yaml: Option<String>,
}

impl AgentSpec {
    /// An agent `id` reached at `webhook_url`, sharing `secret`.
    pub fn new(
        id: impl Into<String>,
        webhook_url: impl Into<String>,
        secret: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            webhook_url: webhook_url.into(),
            secret: rebuno::Secret::new(secret.into()),
            lease_timeout_seconds: None,
            policy_yaml: None,
        }
    }

    /// Lease period in seconds (values below 10 mean the 120 s default).
    #[must_use]
    pub fn lease_timeout_seconds(mut self, seconds: u64) -> Self {
        self.lease_timeout_seconds = Some(seconds);
        self
    }

    /// A policy bundle in the kernel's YAML language. Its `default_action` is `deny` unless it
    /// says `allow`: every tool and LLM call no rule matches is denied (unmatched `local` steps
    /// are allowed), so a bundle that only gates one tool starts with `default_action: allow`.
    #[must_use]
    pub fn policy_yaml(mut self, yaml: impl Into<String>) -> Self {
        self.policy_yaml = Some(yaml.into());
        self
    }

    /// The agent id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

#[cfg(test)]
mod tests {
    use super::AgentSpec;

    #[test]
    fn agent_specs_never_print_their_secret() {
        let spec = AgentSpec::new("a", "http://127.0.0.1:1/webhook", "s3cret-value");
        assert!(!format!("{spec:?}").contains("s3cret-value"));
    }
}
