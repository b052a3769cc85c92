//! The dev manifest (`rebuno dev --config FILE`): agents to provision at start, and how their
//! deliveries are retried.
//!
//! ```yaml
//! dispatch_max_attempts: 8         # optional: attempts before dispatch_exhausted (default 5)
//! dispatch_base_delay: 1s          # optional: first retry delay, a Go duration (default 1s)
//! dispatch_max_delay: 30s          # optional: largest retry delay (default 30s)
//! agents:
//!   - id: hello
//!     webhook_url: http://127.0.0.1:5000/webhook
//!     secret: ${HELLO_SECRET}      # ${ENV} expansion
//!     lease_timeout_seconds: 60    # optional
//!     policy: |                    # optional inline bundle, or policy_file: path
//!       default_action: allow
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::dispatch_retry::{
    BASE_DELAY, DispatchRetry, MAX_ATTEMPTS, MAX_DELAY, Names, parse_attempts, parse_delay,
};
use crate::harness::AgentSpec;

/// Why a manifest could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The YAML is invalid.
    #[error("invalid manifest: {0}")]
    Yaml(String),
    /// A top-level setting (`dispatch_max_attempts`, `dispatch_base_delay`,
    /// `dispatch_max_delay`) has a value it cannot take; the message says what to write.
    #[error("invalid manifest: {0}")]
    Setting(String),
    /// An agent entry is inconsistent.
    #[error("agent {id:?}: {message}")]
    Agent {
        /// The agent id.
        id: String,
        /// What is wrong.
        message: String,
    },
}

/// Unknown top-level keys are ignored, as the Go kernel's loader ignores them (so a manifest
/// with the `dispatch_*` keys still loads in `rebuno dev`).
#[derive(Deserialize)]
struct RawManifest {
    #[serde(default)]
    agents: Vec<RawAgent>,
    #[serde(default)]
    dispatch_max_attempts: Option<serde_yaml::Value>,
    #[serde(default)]
    dispatch_base_delay: Option<serde_yaml::Value>,
    #[serde(default)]
    dispatch_max_delay: Option<serde_yaml::Value>,
}

/// No `Debug`: it holds the secret in the clear.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    id: String,
    webhook_url: String,
    secret: String,
    #[serde(default)]
    lease_timeout_seconds: Option<u64>,
    #[serde(default)]
    policy: Option<String>,
    #[serde(default)]
    policy_file: Option<String>,
}

/// A parsed manifest.
#[derive(Debug, Clone, Default)]
pub struct Manifest {
    /// The agents to register, in file order.
    pub agents: Vec<AgentSpec>,
    /// Delivery retries (`dispatch_max_attempts`, `dispatch_base_delay`,
    /// `dispatch_max_delay`); `rebuno-dev`'s flags and environment take precedence.
    pub dispatch: DispatchRetry,
}

impl Manifest {
    /// Reads a manifest file; `${NAME}` is replaced by the environment variable (empty when
    /// unset) in `id`, `webhook_url`, `secret` and `policy_file`; relative policy files are
    /// resolved against the manifest's directory.
    ///
    /// # Errors
    ///
    /// [`ManifestError`] when a file cannot be read or the YAML is invalid.
    pub fn load(path: &Path) -> Result<Self, ManifestError> {
        let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Read {
            path: path.to_owned(),
            source,
        })?;
        let base = path.parent().unwrap_or_else(|| Path::new("."));
        Self::parse(&text, base, |name| std::env::var(name).ok())
    }

    /// Parses manifest text with an explicit environment and base directory.
    ///
    /// ```
    /// use rebuno_devkernel::Manifest;
    /// let yaml = "agents:\n  - id: hello\n    webhook_url: http://127.0.0.1:5000/webhook\n    secret: ${S}\n";
    /// let manifest = Manifest::parse(yaml, std::path::Path::new("."), |_| Some("dev-secret".into())).unwrap();
    /// assert_eq!(manifest.agents[0].id(), "hello");
    /// ```
    ///
    /// # Errors
    ///
    /// [`ManifestError`] when the YAML is invalid or a policy file cannot be read.
    pub fn parse(
        text: &str,
        base: &Path,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ManifestError> {
        let raw: RawManifest =
            serde_yaml::from_str(text).map_err(|e| ManifestError::Yaml(e.to_string()))?;
        let dispatch = DispatchRetry {
            max_attempts: setting(raw.dispatch_max_attempts, MAX_ATTEMPTS, parse_attempts)?,
            base_delay: setting(raw.dispatch_base_delay, BASE_DELAY, parse_delay)?,
            max_delay: setting(raw.dispatch_max_delay, MAX_DELAY, parse_delay)?,
        };
        let mut agents = Vec::with_capacity(raw.agents.len());
        for agent in raw.agents {
            agents.push(agent_spec(agent, base, &env)?);
        }
        Ok(Self { agents, dispatch })
    }
}

/// A top-level setting written as a string or a number (`null`: not given), parsed by `parse`.
fn setting<T>(
    value: Option<serde_yaml::Value>,
    names: Names,
    parse: fn(&str, &str) -> Result<T, String>,
) -> Result<Option<T>, ManifestError> {
    let text = match value {
        None | Some(serde_yaml::Value::Null) => return Ok(None),
        Some(serde_yaml::Value::String(text)) => text,
        Some(serde_yaml::Value::Number(number)) => number.to_string(),
        Some(_) => {
            return Err(ManifestError::Setting(format!(
                "{} must be a single value, e.g. {}",
                names.key,
                if names.key.ends_with("attempts") {
                    "8"
                } else {
                    "30s"
                }
            )));
        }
    };
    parse(&text, names.key)
        .map(Some)
        .map_err(ManifestError::Setting)
}

fn agent_spec(
    raw: RawAgent,
    base: &Path,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<AgentSpec, ManifestError> {
    let id = expand(&raw.id, env);
    let mut spec = AgentSpec::new(
        id.clone(),
        expand(&raw.webhook_url, env),
        expand(&raw.secret, env),
    );
    if let Some(seconds) = raw.lease_timeout_seconds {
        spec = spec.lease_timeout_seconds(seconds);
    }
    let policy = match (raw.policy, raw.policy_file) {
        (Some(_), Some(_)) => {
            return Err(ManifestError::Agent {
                id,
                message: "set either policy or policy_file, not both".into(),
            });
        }
        (Some(inline), None) => Some(inline),
        (None, Some(file)) => {
            let path = base.join(expand(&file, env));
            Some(
                std::fs::read_to_string(&path)
                    .map_err(|source| ManifestError::Read { path, source })?,
            )
        }
        (None, None) => None,
    };
    if let Some(policy) = policy {
        spec = spec.policy_yaml(policy);
    }
    Ok(spec)
}

/// Replaces every `${NAME}` with the variable's value (empty when unset).
fn expand(text: &str, env: &impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find('}') {
            Some(end) => {
                out.push_str(&env(&after[..end]).unwrap_or_default());
                rest = &after[end + 1..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_env_and_inline_policy() {
        let yaml = "agents:\n  - id: hello\n    webhook_url: http://${HOST}/webhook\n    secret: ${SECRET}\n    lease_timeout_seconds: 60\n    policy: |\n      default_action: allow\n";
        let env = |name: &str| match name {
            "HOST" => Some("127.0.0.1:5000".to_owned()),
            _ => None,
        };
        let manifest = Manifest::parse(yaml, Path::new("."), env).unwrap();
        let spec = &manifest.agents[0];
        assert_eq!(spec.webhook_url, "http://127.0.0.1:5000/webhook");
        assert!(spec.secret.is_empty());
        assert_eq!(spec.lease_timeout_seconds, Some(60));
        assert_eq!(spec.policy_yaml.as_deref(), Some("default_action: allow\n"));
    }

    #[test]
    fn reads_the_dispatch_retries_and_refuses_bad_ones() {
        let yaml = "dispatch_max_attempts: 8\ndispatch_base_delay: 500ms\ndispatch_max_delay: 0\nagents: []\n";
        let manifest = Manifest::parse(yaml, Path::new("."), |_| None).unwrap();
        assert_eq!(manifest.dispatch.max_attempts, Some(8));
        let delays = (manifest.dispatch.base_delay, manifest.dispatch.max_delay);
        assert_eq!(
            delays,
            (
                Some(std::time::Duration::from_millis(500)),
                Some(std::time::Duration::ZERO)
            )
        );
        let none = Manifest::parse("agents: []\n", Path::new("."), |_| None).unwrap();
        assert_eq!(none.dispatch, DispatchRetry::default());
        for (yaml, expected) in [
            (
                "dispatch_max_attempts: 0\n",
                "dispatch_max_attempts is 0: a dispatch needs",
            ),
            (
                "dispatch_max_attempts: lots\n",
                "dispatch_max_attempts \"lots\" is not a number",
            ),
            (
                "dispatch_base_delay: 1\n",
                "dispatch_base_delay \"1\" is not a duration; write",
            ),
            (
                "dispatch_max_delay: [1s]\n",
                "dispatch_max_delay must be a single value, e.g. 30s",
            ),
        ] {
            let error = Manifest::parse(yaml, Path::new("."), |_| None).unwrap_err();
            assert!(
                error
                    .to_string()
                    .starts_with(&format!("invalid manifest: {expected}")),
                "{yaml}: {error}"
            );
        }
    }

    #[test]
    fn rejects_unknown_agent_keys() {
        let yaml = "agents:\n  - id: a\n    webhook_url: u\n    secret: s\n    colour: red\n";
        assert!(Manifest::parse(yaml, Path::new("."), |_| None).is_err());
    }
}
