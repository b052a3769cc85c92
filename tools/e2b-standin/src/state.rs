//! The stand-in's state: sandboxes (a directory and a table of processes each), snapshot
//! templates, and the expiry of sandboxes at their timeout.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, SystemTime};

use nix::sys::signal::Signal;
use tokio::sync::watch;

use crate::capture::Capture;
use crate::config::StandinConfig;
use crate::envd::procs::ProcTable;

/// The template every account has: an empty home `/home/user`.
pub(crate) const BASE_ALIAS: &str = "base";
/// The id the stand-in gives the `base` template.
pub(crate) const BASE_TEMPLATE_ID: &str = "rki5dems9wqfm4r03t7g";
/// The envd version sandboxes report (envd's version in e2b-dev/infra when this was written).
pub(crate) const ENVD_VERSION: &str = "0.6.13";

/// Everything the listener's tasks share.
pub(crate) struct Shared {
    root: PathBuf,
    api_key: String,
    slug: String,
    capture: Capture,
    registry: Mutex<Registry>,
}

#[derive(Default)]
struct Registry {
    sandboxes: HashMap<String, Arc<Sandbox>>,
    templates: HashMap<String, Template>,
    aliases: HashMap<String, String>,
    builds: u64,
}

/// A snapshot template: builds by tag, each a directory copy of a sandbox's filesystem.
#[derive(Clone, Debug)]
pub(crate) struct Template {
    pub(crate) id: String,
    pub(crate) names: Vec<String>,
    pub(crate) source_sandbox: String,
    pub(crate) builds: BTreeMap<String, Build>,
}

/// One build of a snapshot template.
#[derive(Clone, Debug)]
pub(crate) struct Build {
    pub(crate) fs: PathBuf,
    pub(crate) seq: u64,
}

impl Shared {
    pub(crate) fn new(config: &StandinConfig) -> io::Result<Self> {
        let root = config.root_dir().to_path_buf();
        std::fs::create_dir_all(root.join("sandboxes"))?;
        std::fs::create_dir_all(root.join("snapshots"))?;
        let root = root.canonicalize()?;
        Ok(Self {
            root,
            api_key: config.key().to_owned(),
            slug: config.slug().to_owned(),
            capture: Capture::open(config.capture_path())?,
            registry: Mutex::new(Registry::default()),
        })
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn api_key(&self) -> &str {
        &self.api_key
    }

    pub(crate) fn slug(&self) -> &str {
        &self.slug
    }

    pub(crate) fn capture(&self) -> &Capture {
        &self.capture
    }

    pub(crate) fn sandbox_fs(&self, id: &str) -> PathBuf {
        self.root.join("sandboxes").join(id).join("fs")
    }

    pub(crate) fn sandbox(&self, id: &str) -> Option<Arc<Sandbox>> {
        self.registry().sandboxes.get(id).cloned()
    }

    /// Every sandbox, running or paused.
    pub(crate) fn sandboxes(&self) -> Vec<Arc<Sandbox>> {
        self.registry().sandboxes.values().cloned().collect()
    }

    pub(crate) fn insert(&self, sandbox: Arc<Sandbox>) {
        self.registry()
            .sandboxes
            .insert(sandbox.id.clone(), sandbox);
    }

    /// Removes a sandbox: kills its processes, drops its connections, deletes its directory.
    pub(crate) fn kill(&self, id: &str) -> bool {
        let Some(sandbox) = self.registry().sandboxes.remove(id) else {
            return false;
        };
        sandbox.procs.signal_all(Signal::SIGKILL);
        sandbox.drop_connections();
        let dir = sandbox.dir.clone();
        tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir));
        true
    }

    /// Kills every sandbox's processes (on shutdown); the directories stay.
    pub(crate) fn kill_all(&self) {
        for sandbox in self.registry().sandboxes.values() {
            sandbox.procs.signal_all(Signal::SIGCONT);
            sandbox.procs.signal_all(Signal::SIGKILL);
            sandbox.drop_connections();
        }
    }

    /// The template an identifier names (`namespace/alias`, `alias` or a template id).
    pub(crate) fn template(&self, identifier: &str) -> Option<Template> {
        let registry = self.registry();
        let id = match identifier.split_once('/') {
            Some(_) => registry.aliases.get(identifier)?,
            None => registry
                .aliases
                .get(&format!("{}/{identifier}", self.slug))
                .map_or(identifier, String::as_str),
        };
        registry.templates.get(id).cloned()
    }

    /// The template id a new build of `name` (`None`: a new unnamed template) goes to.
    pub(crate) fn template_for_name(&self, name: Option<&str>) -> Option<String> {
        let name = name?;
        self.registry()
            .aliases
            .get(&format!("{}/{name}", self.slug))
            .cloned()
    }

    /// Records a snapshot build.
    pub(crate) fn add_build(
        &self,
        template_id: &str,
        name: Option<&str>,
        source: &str,
        tag: &str,
        fs: PathBuf,
    ) {
        let mut registry = self.registry();
        registry.builds += 1;
        let seq = registry.builds;
        let full_name = name.map(|n| format!("{}/{n}", self.slug));
        if let Some(full) = &full_name {
            registry
                .aliases
                .insert(full.clone(), template_id.to_owned());
        }
        let template = registry
            .templates
            .entry(template_id.to_owned())
            .or_insert_with(|| Template {
                id: template_id.to_owned(),
                names: full_name.into_iter().collect(),
                source_sandbox: source.to_owned(),
                builds: BTreeMap::new(),
            });
        template.source_sandbox = source.to_owned();
        template.builds.insert(tag.to_owned(), Build { fs, seq });
    }

    /// Forgets the template `identifier` names (an id or a name) with its aliases, and returns
    /// it.
    pub(crate) fn remove_template(&self, identifier: &str) -> Option<Template> {
        let id = self.template(identifier)?.id;
        let mut registry = self.registry();
        registry.aliases.retain(|_, target| *target != id);
        registry.templates.remove(&id)
    }

    /// Every snapshot template, oldest build first.
    pub(crate) fn templates(&self) -> Vec<Template> {
        let mut all: Vec<Template> = self.registry().templates.values().cloned().collect();
        all.sort_by_key(|t| t.builds.values().map(|b| b.seq).max().unwrap_or(0));
        all
    }

    fn expired(&self, now: SystemTime) -> Vec<Arc<Sandbox>> {
        self.registry()
            .sandboxes
            .values()
            .filter(|s| s.is_running() && s.end_at() <= now)
            .cloned()
            .collect()
    }
}

/// Kills (or, with `autoPause`, pauses) sandboxes whose timeout has passed, until the stand-in
/// is dropped.
pub(crate) async fn reap_expired(shared: Weak<Shared>) {
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        for sandbox in shared.expired(SystemTime::now()) {
            if sandbox.auto_pause {
                sandbox.pause();
            } else {
                shared.kill(&sandbox.id);
            }
        }
    }
}

/// Whether a sandbox runs or is paused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RunState {
    Running,
    Paused,
}

struct Life {
    state: RunState,
    end_at: SystemTime,
}

/// What a sandbox is created with.
pub(crate) struct SandboxSpec {
    pub(crate) template_id: String,
    pub(crate) alias: Option<String>,
    pub(crate) envd_token: Option<String>,
    pub(crate) env_vars: BTreeMap<String, String>,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) auto_pause: bool,
    pub(crate) timeout: Duration,
}

/// A sandbox: its directory, its processes and its lifecycle.
pub(crate) struct Sandbox {
    pub(crate) id: String,
    pub(crate) template_id: String,
    pub(crate) alias: Option<String>,
    pub(crate) envd_token: Option<String>,
    pub(crate) dir: PathBuf,
    pub(crate) fs: PathBuf,
    pub(crate) started_at: SystemTime,
    pub(crate) env_vars: BTreeMap<String, String>,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) auto_pause: bool,
    pub(crate) procs: ProcTable,
    life: Mutex<Life>,
    drops: watch::Sender<u64>,
}

impl Sandbox {
    pub(crate) fn new(id: String, dir: PathBuf, spec: SandboxSpec) -> Self {
        let now = SystemTime::now();
        Self {
            fs: dir.join("fs"),
            dir,
            id,
            template_id: spec.template_id,
            alias: spec.alias,
            envd_token: spec.envd_token,
            started_at: now,
            env_vars: spec.env_vars,
            metadata: spec.metadata,
            auto_pause: spec.auto_pause,
            procs: ProcTable::default(),
            life: Mutex::new(Life {
                state: RunState::Running,
                end_at: now + spec.timeout,
            }),
            drops: watch::Sender::new(0),
        }
    }

    fn life(&self) -> MutexGuard<'_, Life> {
        self.life
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn state(&self) -> RunState {
        self.life().state
    }

    pub(crate) fn is_running(&self) -> bool {
        self.state() == RunState::Running
    }

    pub(crate) fn end_at(&self) -> SystemTime {
        self.life().end_at
    }

    /// Sets the end to `now + timeout`; with `only_extend`, never earlier than it was.
    pub(crate) fn set_timeout(&self, timeout: Duration, only_extend: bool) {
        let mut life = self.life();
        let end = SystemTime::now() + timeout;
        if !only_extend || end > life.end_at {
            life.end_at = end;
        }
    }

    /// Pauses a running sandbox: stops its processes and drops its connections. `false` when
    /// it was already paused.
    pub(crate) fn pause(&self) -> bool {
        {
            let mut life = self.life();
            if life.state == RunState::Paused {
                return false;
            }
            life.state = RunState::Paused;
        }
        self.procs.signal_all(Signal::SIGSTOP);
        self.drop_connections();
        true
    }

    /// Resumes a paused sandbox for `timeout`: continues its processes. `false` when it was
    /// running.
    pub(crate) fn resume(&self, timeout: Duration) -> bool {
        {
            let mut life = self.life();
            if life.state == RunState::Running {
                return false;
            }
            life.state = RunState::Running;
            life.end_at = SystemTime::now() + timeout;
        }
        self.procs.signal_all(Signal::SIGCONT);
        true
    }

    /// Ends every open envd stream of the sandbox abruptly, as pausing, snapshotting or killing
    /// a real sandbox drops its connections.
    pub(crate) fn drop_connections(&self) {
        self.drops.send_modify(|generation| *generation += 1);
    }

    /// A receiver that changes whenever the sandbox drops its connections.
    pub(crate) fn connection_drops(&self) -> watch::Receiver<u64> {
        self.drops.subscribe()
    }
}
