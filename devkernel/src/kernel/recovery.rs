//! Coming back from a restart (`rebuno-dev --data-dir`): the agents and API keys replayed
//! from the registry, every execution rebuilt from its persisted log, the indexes over them
//! rebuilt, and what was in flight reclaimed as after a lease expiry, under a fresh dispatch
//! so no handler of the old process can write again.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use super::{Followups, Kernel};
use crate::error::KernelError;
use crate::event::{DeliveryOutcome, DispatchChanged, DispatchState, EventBody, Recorded};
use crate::model::ExecutionStatus;
use crate::store::{ExecCell, ExecState, Journal, Recovered, Registry};

/// How often unsynced journal and registry writes are flushed to disk.
const SYNC_INTERVAL: Duration = Duration::from_millis(10);

/// What a data directory holds at start (nothing without one).
#[derive(Debug, Default)]
pub(super) struct Persisted {
    /// The event log, appended to from now on.
    pub(super) journal: Option<Arc<Journal<Recorded>>>,
    /// Every event it held.
    pub(super) events: Vec<Recorded>,
    /// The agent and API key registry, appended to from now on.
    pub(super) registry: Option<Arc<Registry>>,
    /// The agents and keys it held.
    pub(super) recovered: Recovered,
}

impl Persisted {
    /// Opens (creating) the event log and the registry of `dir` and reads them back.
    pub(super) fn open(dir: Option<&Path>) -> Result<Self, KernelError> {
        let Some(dir) = dir else {
            return Ok(Self::default());
        };
        let failed = |what: &str, error: std::io::Error| {
            KernelError::Internal(format!("{what} in {}: {error}", dir.display()))
        };
        let (registry, recovered) = Registry::open(dir).map_err(|e| failed("registry", e))?;
        let (journal, events) = Journal::open(dir).map_err(|e| failed("event log", e))?;
        if !recovered.agents.is_empty() || !recovered.keys.is_empty() {
            tracing::info!(
                agents = recovered.agents.len(),
                api_keys = recovered.keys.len(),
                "registry recovered"
            );
        }
        Ok(Self {
            journal: Some(Arc::new(journal)),
            events,
            registry: Some(Arc::new(registry)),
            recovered,
        })
    }
}

impl Kernel {
    /// Rebuilds the executions of a recovered log and the indexes over them.
    pub(super) fn restore(&self, events: Vec<Recorded>) {
        let mut logs: BTreeMap<Uuid, Vec<Recorded>> = BTreeMap::new();
        for event in events {
            logs.entry(event.execution_id).or_default().push(event);
        }
        let mut cells = Vec::new();
        for (id, log) in logs {
            match ExecState::rebuild(log, self.recorder().clone()) {
                Some(state) => cells.push(Arc::new(ExecCell::new(state))),
                None => {
                    tracing::warn!(execution = %id, "event log does not start with its creation; skipped")
                }
            }
        }
        cells.sort_by_key(|cell| cell.lock().exec.created_at);
        for cell in &cells {
            self.store().insert_execution(cell.clone());
        }
        for cell in &cells {
            self.index(cell);
        }
        if !cells.is_empty() {
            tracing::info!(executions = cells.len(), "event log recovered");
        }
    }

    /// Indexes one recovered execution: idempotency key, approvals, its parent's child list,
    /// its session.
    fn index(&self, cell: &ExecCell) {
        let state = cell.lock();
        let exec = &state.exec;
        if let Some(key) = &exec.idempotency_key {
            self.store().with_idempotency(|index| {
                index.insert((exec.agent_id.clone(), key.clone()), exec.id);
            });
        }
        for approval in state.approvals.keys() {
            self.store().index_approval(*approval, exec.id);
        }
        if let Some(spawned) = &exec.spawned_by
            && let Ok(parent) = Uuid::parse_str(&spawned.execution_id)
            && let Some(parent) = self.store().execution(parent)
        {
            parent
                .lock()
                .children
                .insert(spawned.step_id.clone(), exec.id);
        }
        if let Some(session) = &exec.session {
            self.sessions().restore(session, exec.id, exec.status);
        }
    }

    /// Resumes recovered work (call once the agents are registered): running executions
    /// get a fresh dispatch, sessions without a holder admit their next execution, and the
    /// hooks of ended executions run again (each is a no-op when it already ran).
    pub(crate) fn resume(&self) {
        let mut followups = Followups::default();
        let mut sessions = BTreeSet::new();
        for cell in self.store().executions_desc().into_iter().rev() {
            let (status, session, hooks) = {
                let state = cell.lock();
                let hooks = state.exec.spawned_by.is_some() || !state.children.is_empty();
                (state.exec.status, state.exec.session.clone(), hooks)
            };
            match status {
                ExecutionStatus::Running => followups.extend(self.redispatch(&cell)),
                ExecutionStatus::Pending if session.is_none() => {
                    followups.extend(self.start_execution(cell.id));
                }
                status if status.is_terminal() && hooks => followups.terminal.push(cell.id),
                _ => {}
            }
            sessions.extend(session);
        }
        for session in sessions {
            if let Some(next) = self.sessions().admit_next(&session) {
                followups.extend(self.start_execution(next));
            }
        }
        self.run(followups);
    }

    /// Retires a running execution's dispatches (`dispatch.reclaimed`, `kernel_restart`) and
    /// queues a fresh one.
    fn redispatch(&self, cell: &ExecCell) -> Followups {
        let mut state = cell.lock();
        let id = state.exec.id;
        if let Some((dispatch, attempt)) = last_dispatch(&state) {
            let outcome = DeliveryOutcome {
                attempt,
                http_status: None,
                error: "kernel_restart".to_owned(),
            };
            state.record(EventBody::DispatchReclaimed(DispatchChanged::failed(
                dispatch,
                id,
                DispatchState::Exhausted,
                &outcome,
            )));
        }
        let dispatch = state.enqueue_dispatch(self.clock().now());
        Followups {
            deliver: vec![(id, dispatch)],
            terminal: Vec::new(),
        }
    }

    /// Flushes the journal and the registry to disk every few milliseconds until shutdown
    /// (then once more).
    pub(crate) fn spawn_syncer(&self) {
        let journal = self.recorder().journal.clone();
        let registry = self.store().registry().cloned();
        if journal.is_none() && registry.is_none() {
            return;
        }
        let token = self.shutdown_token().clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(SYNC_INTERVAL);
            loop {
                let stop = tokio::select! {
                    () = token.cancelled() => true,
                    _ = ticker.tick() => false,
                };
                if let Some(journal) = &journal
                    && let Err(error) = journal.sync()
                {
                    tracing::error!(%error, "cannot sync the event log");
                }
                if let Some(registry) = &registry
                    && let Err(error) = registry.sync()
                {
                    tracing::error!(%error, "cannot sync the registry");
                }
                if stop {
                    return;
                }
            }
        });
    }
}

/// The newest dispatch of a recovered log and the highest attempt it reached.
fn last_dispatch(state: &ExecState) -> Option<(Uuid, u32)> {
    let mut last: Option<(Uuid, u32)> = None;
    for event in &state.events {
        let (EventBody::DispatchQueued(change)
        | EventBody::DispatchAcked(change)
        | EventBody::DispatchFailed(change)
        | EventBody::DispatchReclaimed(change)) = &event.body
        else {
            continue;
        };
        last = match last {
            Some((id, attempt)) if id == change.dispatch_id => {
                Some((id, attempt.max(change.attempt)))
            }
            _ => Some((change.dispatch_id, change.attempt)),
        };
    }
    last
}
