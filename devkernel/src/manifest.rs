//! The dev manifest (`rebuno dev --config FILE`): agents to provision at start.
//!
//! ```yaml
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
    /// An agent entry is inconsistent.
    #[error("agent {id:?}: {message}")]
    Agent {
        /// The agent id.
        id: String,
        /// What is wrong.
        message: String,
    },
}

#[derive(Deserialize)]
struct RawManifest {
    #[serde(default)]
    agents: Vec<RawAgent>,
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
        let mut agents = Vec::with_capacity(raw.agents.len());
        for agent in raw.agents {
            agents.push(agent_spec(agent, base, &env)?);
        }
        Ok(Self { agents })
    }
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
    fn rejects_unknown_agent_keys() {
        let yaml = "agents:\n  - id: a\n    webhook_url: u\n    secret: s\n    colour: red\n";
        assert!(Manifest::parse(yaml, Path::new("."), |_| None).is_err());
    }
}
