//! The agent and API key registry of `rebuno-dev --data-dir`: `registry.jsonl`, a
//! [`Journal`] of typed records written by every mutation of an agent or a key, each the full
//! state it left (or an agent's deletion). Replaying the file, the last record of an agent or
//! a key is its state.
//!
//! The file holds agent secrets (the current one and the one a rotation replaced), so it is
//! created readable by its owner only (mode `0600` on Unix). API keys are stored as the
//! kernel keeps them: the listed key and its token's SHA-256, never the token.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::Arc;

use rebuno::Secret;
use rebuno::client::ApiKey;
use serde::{Deserialize, Serialize, Serializer};
use uuid::Uuid;

use super::AgentEntry;
use super::journal::{Journal, Line};
use crate::model::AgentRow;
use crate::policy::Policy;

/// An API key as the kernel keeps it: the listed key and its token's digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KeyRow {
    /// The key as listed.
    pub(crate) key: ApiKey,
    /// The SHA-256 (hex) of its current token.
    pub(crate) digest: String,
}

/// One line of the registry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Entry {
    /// An agent's full state after a mutation.
    Agent(StoredAgent),
    /// An agent was deleted.
    AgentDeleted {
        /// The agent id.
        id: String,
    },
    /// An API key's full state after a mutation.
    ApiKey(KeyRow),
}

impl Line for Entry {
    const FILE: &'static str = "registry.jsonl";
    const NOUN: &'static str = "registry record";
    const PRIVATE: bool = true;
}

/// An agent as the kernel keeps it, its compiled policy as the bundle's YAML.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct StoredAgent {
    agent: AgentRow,
    #[serde(serialize_with = "expose")]
    secret: Secret,
    #[serde(
        default,
        serialize_with = "expose_previous",
        skip_serializing_if = "Option::is_none"
    )]
    previous_secret: Option<Secret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    policy: Option<String>,
}

/// Writes a secret's value: the one place it is serialized, for the registry file only.
fn expose<S: Serializer>(secret: &Secret, serializer: S) -> Result<S::Ok, S::Error> {
    let value = std::str::from_utf8(secret.expose())
        .map_err(|_| serde::ser::Error::custom("a secret is not UTF-8"))?;
    serializer.serialize_str(value)
}

/// [`expose`] for the secret a rotation replaced (skipped when there is none).
fn expose_previous<S: Serializer>(
    secret: &Option<Secret>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match secret {
        Some(secret) => expose(secret, serializer),
        None => serializer.serialize_none(),
    }
}

impl StoredAgent {
    fn of(entry: &AgentEntry) -> Self {
        Self {
            agent: entry.agent.clone(),
            secret: entry.secret.clone(),
            previous_secret: entry.previous_secret.clone(),
            policy: entry.policy.as_ref().map(|p| p.yaml().to_owned()),
        }
    }

    /// The agent back, its policy compiled again.
    fn into_entry(self) -> io::Result<AgentEntry> {
        let policy = match &self.policy {
            Some(yaml) => Some(Arc::new(Policy::parse(yaml).map_err(|error| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("agent {:?}: stored policy: {error}", self.agent.id),
                )
            })?)),
            None => None,
        };
        Ok(AgentEntry {
            agent: self.agent,
            secret: self.secret,
            previous_secret: self.previous_secret,
            policy,
        })
    }
}

/// What a registry file held: the agents (sorted by id) and keys (oldest first) its last
/// records describe.
#[derive(Debug, Default)]
pub(crate) struct Recovered {
    /// The agents not deleted since.
    pub(crate) agents: Vec<AgentEntry>,
    /// Every key by id, revoked ones included.
    pub(crate) keys: BTreeMap<Uuid, KeyRow>,
}

/// The registry file.
#[derive(Debug)]
pub(crate) struct Registry {
    file: Journal<Entry>,
}

impl Registry {
    /// Opens (creating, mode `0600`) `dir/registry.jsonl` and replays it.
    pub(crate) fn open(dir: &Path) -> io::Result<(Self, Recovered)> {
        let (file, entries) = Journal::open(dir)?;
        Ok((Self { file }, replay(entries)?))
    }

    /// Records an agent's state after a registration or a change.
    pub(crate) fn agent(&self, entry: &AgentEntry) {
        self.file.append(&Entry::Agent(StoredAgent::of(entry)));
    }

    /// Records an agent's deletion.
    pub(crate) fn agent_deleted(&self, id: &str) {
        self.file.append(&Entry::AgentDeleted { id: id.to_owned() });
    }

    /// Records an API key's state after its creation, rotation or revocation.
    pub(crate) fn api_key(&self, row: &KeyRow) {
        self.file.append(&Entry::ApiKey(row.clone()));
    }

    /// Flushes written records to the disk if any are unsynced.
    pub(crate) fn sync(&self) -> io::Result<()> {
        self.file.sync()
    }
}

/// The state the records leave, the last of each agent or key winning.
fn replay(entries: Vec<Entry>) -> io::Result<Recovered> {
    let mut agents = BTreeMap::new();
    let mut keys = BTreeMap::new();
    for entry in entries {
        match entry {
            Entry::Agent(agent) => {
                agents.insert(agent.agent.id.clone(), agent);
            }
            Entry::AgentDeleted { id } => {
                agents.remove(&id);
            }
            Entry::ApiKey(row) => {
                let id = Uuid::parse_str(&row.key.id).map_err(|e| {
                    io::Error::new(io::ErrorKind::InvalidData, format!("api key id: {e}"))
                })?;
                keys.insert(id, row);
            }
        }
    }
    Ok(Recovered {
        agents: agents
            .into_values()
            .map(StoredAgent::into_entry)
            .collect::<io::Result<_>>()?,
        keys,
    })
}

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;
    use std::io::Write;
    use std::path::PathBuf;

    use serde_json::json;
    use uuid::Uuid;

    use super::*;
    use crate::model::Timestamp;

    fn temp_dir() -> PathBuf {
        std::env::temp_dir().join(format!("rebuno-registry-{}", Uuid::now_v7()))
    }

    fn agent(id: &str, secret: &str) -> AgentEntry {
        let yaml = "default_action: allow\nrules:\n  - id: no-rm\n    when: { step_kind: tool_call, target: \"rm*\" }\n    then: { decision: deny, reason: destructive }\n";
        AgentEntry {
            agent: AgentRow {
                id: id.to_owned(),
                webhook_url: format!("http://127.0.0.1:9/{id}"),
                policy_bundle: Some(yaml.to_owned()),
                registered_at: Timestamp::now(),
                lease_timeout_seconds: Some(30),
                description: Some("counts".to_owned()),
                input_schema: Some(json!({"type": "integer"})),
                output_schema: None,
            },
            secret: Secret::new(secret),
            previous_secret: Some(Secret::new("old-secret")),
            policy: Some(Arc::new(Policy::parse(yaml).unwrap())),
        }
    }

    fn key(name: &str, digest: &str) -> KeyRow {
        let mut key = ApiKey::default();
        key.id = Uuid::now_v7().to_string();
        key.name = name.to_owned();
        key.scopes = vec![rebuno::client::Scope::ExecutionsRead];
        key.created_at = Timestamp::now().to_string();
        let digest = digest.to_owned();
        KeyRow { key, digest }
    }

    /// What the kernel compares of an agent: the record, both secrets and the policy text.
    fn view(entry: &AgentEntry) -> (AgentRow, Secret, Option<Secret>, Option<String>) {
        (
            entry.agent.clone(),
            entry.secret.clone(),
            entry.previous_secret.clone(),
            entry.policy.as_ref().map(|p| p.yaml().to_owned()),
        )
    }

    #[test]
    fn agents_and_keys_round_trip() {
        let dir = temp_dir();
        let (registry, none) = Registry::open(&dir).unwrap();
        assert!(none.agents.is_empty() && none.keys.is_empty());
        let (counter, ci) = (agent("counter", "s3cret"), key("ci", "digest-1"));
        registry.agent(&counter);
        registry.api_key(&ci);
        registry.sync().unwrap();
        drop(registry);
        let (_, back) = Registry::open(&dir).unwrap();
        assert_eq!(back.agents.len(), 1);
        assert_eq!(view(&back.agents[0]), view(&counter));
        let rule_ids = |e: &AgentEntry| {
            let policy = e.policy.as_ref().unwrap();
            policy.rule_ids().map(str::to_owned).collect::<Vec<_>>()
        };
        assert_eq!(rule_ids(&back.agents[0]), rule_ids(&counter));
        assert_eq!(back.keys.into_values().collect::<Vec<_>>(), vec![ci]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_last_record_of_an_agent_or_a_key_wins() {
        let dir = temp_dir();
        let (registry, _) = Registry::open(&dir).unwrap();
        let (mut first, second) = (key("first", "d1"), key("second", "d2"));
        registry.agent(&agent("a", "one"));
        registry.agent(&agent("b", "kept"));
        registry.api_key(&first);
        registry.api_key(&second);
        let mut a = agent("a", "two");
        a.previous_secret = None;
        a.policy = None;
        a.agent.policy_bundle = None;
        registry.agent(&a);
        registry.agent_deleted("b");
        first.key.revoked_at = Some(Timestamp::now().to_string());
        "d3".clone_into(&mut first.digest);
        registry.api_key(&first);
        drop(registry);
        let (_, back) = Registry::open(&dir).unwrap();
        let agents: Vec<_> = back.agents.iter().map(view).collect();
        assert_eq!(agents, vec![view(&a)]);
        assert_eq!(back.keys.into_values().collect::<Vec<_>>(), [first, second]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_torn_tail_is_dropped_and_a_corrupt_middle_is_an_error() {
        let dir = temp_dir();
        let (registry, _) = Registry::open(&dir).unwrap();
        let one = agent("one", "s1");
        registry.agent(&one);
        drop(registry);
        let path = dir.join(Entry::FILE);
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(br#"{"type":"agent","agent":{"id":"#)
            .unwrap();
        drop(file);
        let (registry, back) = Registry::open(&dir).unwrap();
        assert_eq!(
            back.agents.iter().map(view).collect::<Vec<_>>(),
            vec![view(&one)]
        );
        registry.agent_deleted("one");
        drop(registry);
        let (_, back) = Registry::open(&dir).unwrap();
        assert!(
            back.agents.is_empty(),
            "the line after the torn one was lost"
        );

        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("not json\n{text}")).unwrap();
        let error = Registry::open(&dir).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn secrets_are_on_disk_only_and_the_file_is_private() {
        let dir = temp_dir();
        let (registry, _) = Registry::open(&dir).unwrap();
        let entry = Entry::Agent(StoredAgent::of(&agent("a", "s3cret-value")));
        assert!(!format!("{entry:?}").contains("s3cret-value"));
        registry.agent(&agent("a", "s3cret-value"));
        drop(registry);
        let path = dir.join(Entry::FILE);
        let line: serde_json::Value =
            serde_json::from_str(std::fs::read_to_string(&path).unwrap().trim()).unwrap();
        assert_eq!(line["type"], "agent");
        assert_eq!(line["secret"], "s3cret-value");
        assert_eq!(line["previous_secret"], "old-secret");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
