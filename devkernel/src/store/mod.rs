//! In-memory state: agents, executions (each behind its own lock) and indexes; with a data
//! directory, the files that persist them ([`Journal`], [`Registry`]).

mod apply;
mod dispatch;
mod exec;
mod journal;
mod leases;
mod registry;
mod resource;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use rebuno::Secret;
use uuid::Uuid;

use crate::model::AgentRow;
use crate::policy::Policy;

pub(crate) use apply::canonical_text;
pub(crate) use dispatch::{Dispatch, DispatchStatus};
pub(crate) use exec::{ExecCell, ExecState, Recorder};
pub(crate) use journal::{Batch, Journal, Line};
pub(crate) use leases::{HeldLease, Lease, LeaseBook};
pub(crate) use registry::{KeyRow, Recovered, Registry};
pub(crate) use resource::{Capture, Resource};

/// A registered agent with its secret and compiled policy.
#[derive(Debug, Clone)]
pub(crate) struct AgentEntry {
    /// The public view.
    pub(crate) agent: AgentRow,
    /// HMAC secret: signs webhooks and verifies the agent's requests.
    pub(crate) secret: Secret,
    /// The secret before a rotation, still accepted on the agent's requests until retired.
    pub(crate) previous_secret: Option<Secret>,
    /// Compiled policy bundle, if any.
    pub(crate) policy: Option<Arc<Policy>>,
}

/// All kernel state.
#[derive(Debug, Default)]
pub(crate) struct Store {
    agents: RwLock<BTreeMap<String, AgentEntry>>,
    /// Persists every agent mutation (and the API keys'), with a data directory.
    registry: Option<Arc<Registry>>,
    executions: RwLock<BTreeMap<Uuid, Arc<ExecCell>>>,
    /// `(agent_id, idempotency_key)` → execution.
    idempotency: Mutex<HashMap<(String, String), Uuid>>,
    /// Approval id → execution id.
    approvals: Mutex<BTreeMap<Uuid, Uuid>>,
    /// Executions that may hold a live dispatch (scanned by the reaper).
    live: Mutex<HashSet<Uuid>>,
}

/// Locks a mutex, ignoring poisoning (state stays consistent: no panics while held).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

impl Store {
    /// A store persisting its agents in `registry`, holding the `agents` it recovered.
    pub(crate) fn new(registry: Option<Arc<Registry>>, agents: Vec<AgentEntry>) -> Self {
        let agents = agents.into_iter().map(|a| (a.agent.id.clone(), a));
        Self {
            agents: RwLock::new(agents.collect()),
            registry,
            ..Self::default()
        }
    }

    /// The registry file, with a data directory.
    pub(crate) fn registry(&self) -> Option<&Arc<Registry>> {
        self.registry.as_ref()
    }

    /// A registered agent.
    pub(crate) fn agent(&self, id: &str) -> Option<AgentEntry> {
        read(&self.agents).get(id).cloned()
    }

    /// All agents sorted by id.
    pub(crate) fn agents(&self) -> Vec<AgentRow> {
        read(&self.agents)
            .values()
            .map(|r| r.agent.clone())
            .collect()
    }

    /// Inserts or replaces an agent (persisted first, under the lock, so the registry's
    /// order is the order of the changes).
    pub(crate) fn put_agent(&self, record: AgentEntry) {
        let mut agents = write(&self.agents);
        if let Some(registry) = &self.registry {
            registry.agent(&record);
        }
        agents.insert(record.agent.id.clone(), record);
    }

    /// Updates an agent in place (and persists its new state); `false` if it does not exist.
    pub(crate) fn update_agent(&self, id: &str, f: impl FnOnce(&mut AgentEntry)) -> bool {
        match write(&self.agents).get_mut(id) {
            Some(record) => {
                f(record);
                if let Some(registry) = &self.registry {
                    registry.agent(record);
                }
                true
            }
            None => false,
        }
    }

    /// Removes an agent (and persists its removal, if it existed).
    pub(crate) fn delete_agent(&self, id: &str) {
        let mut agents = write(&self.agents);
        if agents.remove(id).is_some()
            && let Some(registry) = &self.registry
        {
            registry.agent_deleted(id);
        }
    }

    /// An execution's cell.
    pub(crate) fn execution(&self, id: Uuid) -> Option<Arc<ExecCell>> {
        read(&self.executions).get(&id).cloned()
    }

    /// Inserts a new execution.
    pub(crate) fn insert_execution(&self, cell: Arc<ExecCell>) {
        write(&self.executions).insert(cell.id, cell);
    }

    /// Forgets executions (retention): their cells and every index entry naming them. A
    /// caller still holding a cell keeps it; nothing finds it by id any more.
    pub(crate) fn remove_executions(&self, ids: &HashSet<Uuid>) {
        if ids.is_empty() {
            return;
        }
        write(&self.executions).retain(|id, _| !ids.contains(id));
        lock(&self.idempotency).retain(|_, id| !ids.contains(id));
        lock(&self.approvals).retain(|_, id| !ids.contains(id));
        lock(&self.live).retain(|id| !ids.contains(id));
    }

    /// All execution cells, newest first.
    pub(crate) fn executions_desc(&self) -> Vec<Arc<ExecCell>> {
        read(&self.executions).values().rev().cloned().collect()
    }

    /// Runs `f` with the idempotency index locked.
    pub(crate) fn with_idempotency<R>(
        &self,
        f: impl FnOnce(&mut HashMap<(String, String), Uuid>) -> R,
    ) -> R {
        f(&mut lock(&self.idempotency))
    }

    /// Records which execution owns an approval.
    pub(crate) fn index_approval(&self, approval: Uuid, execution: Uuid) {
        lock(&self.approvals).insert(approval, execution);
    }

    /// The execution owning an approval.
    pub(crate) fn approval_execution(&self, approval: Uuid) -> Option<Uuid> {
        lock(&self.approvals).get(&approval).copied()
    }

    /// All approval ids (oldest first) with their executions.
    pub(crate) fn approval_ids(&self) -> Vec<(Uuid, Uuid)> {
        lock(&self.approvals)
            .iter()
            .map(|(a, e)| (*a, *e))
            .collect()
    }

    /// Marks an execution as possibly holding a live dispatch.
    pub(crate) fn mark_live(&self, id: Uuid) {
        lock(&self.live).insert(id);
    }

    /// Forgets an execution that holds no live dispatch any more.
    pub(crate) fn unmark_live(&self, id: Uuid) {
        lock(&self.live).remove(&id);
    }

    /// Executions that may hold a live dispatch.
    pub(crate) fn live(&self) -> Vec<Uuid> {
        lock(&self.live).iter().copied().collect()
    }
}
