//! Coming back from a restart (`rebuno-dev --data-dir`): the agents and API keys replayed
//! from the registry, every execution rebuilt from its persisted log, the indexes over them
//! rebuilt, and each lease that was in flight taken up again as the Go kernel does (its leases
//! are rows with an expiry): an agent still running keeps its dispatch, heartbeats on and
//! completes, while a lease that ran out during the restart is reclaimed by the sweep like any
//! expired lease. Only a running execution whose lease was not kept (a data directory from
//! before leases were kept) gets a fresh dispatch, so no handler of the old process can write.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use super::{Followups, Kernel};
use crate::error::KernelError;
use crate::event::{DeliveryOutcome, DispatchChanged, DispatchState, EventBody, Recorded};
use crate::store::{
    Batch, ExecCell, ExecState, HeldLease, Journal, LeaseBook, Recovered, Registry,
};
use rebuno::wire::ExecutionStatus;

/// How often unsynced journal and registry writes are flushed to disk.
const SYNC_INTERVAL: Duration = Duration::from_millis(10);

/// What a data directory holds at start (nothing without one).
#[derive(Debug, Default)]
pub(super) struct Persisted {
    /// The event log, appended to from now on.
    pub(super) journal: Option<Arc<Journal<Batch>>>,
    /// Every event it held.
    pub(super) events: Vec<Recorded>,
    /// The agent and API key registry, appended to from now on.
    pub(super) registry: Option<Arc<Registry>>,
    /// The agents and keys it held.
    pub(super) recovered: Recovered,
    /// The lease book, appended to from now on.
    pub(super) leases: Option<Arc<LeaseBook>>,
    /// The leases it held, by execution.
    pub(super) held: std::collections::HashMap<Uuid, HeldLease>,
    /// The record of executions retention deleted, appended to from now on.
    pub(super) deletions: Option<Arc<Journal<super::retention::Deletions>>>,
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
        let (journal, batches, deletions) =
            super::retention::open_event_log(dir).map_err(|e| failed("event log", e))?;
        let events = batches.into_iter().flat_map(|batch| batch.0).collect();
        let (leases, held) = LeaseBook::open(dir).map_err(|e| failed("leases", e))?;
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
            leases: Some(Arc::new(leases)),
            held,
            deletions: Some(Arc::new(deletions)),
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

    /// Resumes recovered work (call once the agents are registered, before serving): the
    /// hooks of ended executions run again first (each is a no-op when it already ran, and
    /// a live child of an ended parent is cancelled before it is redelivered); then running
    /// executions get a fresh dispatch, blocked ones with nothing left to wait for resume,
    /// and sessions without a holder admit their next execution.
    pub(crate) fn resume(&self) {
        let cells: Vec<_> = self.store().executions_desc().into_iter().rev().collect();
        let ended = cells
            .iter()
            .filter(|cell| {
                let state = cell.lock();
                state.exec.status.is_terminal()
                    && (state.exec.spawned_by.is_some() || !state.children.is_empty())
            })
            .map(|cell| cell.id)
            .collect();
        self.run(Followups {
            deliver: Vec::new(),
            terminal: ended,
        });
        let mut kept = std::mem::take(&mut *crate::store::lock(&self.inner.kept_leases));
        let mut followups = Followups::default();
        let mut sessions = BTreeSet::new();
        for cell in &cells {
            let (status, session) = {
                let state = cell.lock();
                (state.exec.status, state.exec.session.clone())
            };
            match status {
                ExecutionStatus::Running => {
                    followups.extend(self.take_up(cell, kept.remove(&cell.id)));
                }
                ExecutionStatus::Blocked => {
                    followups.extend(self.resume_if_idle(&mut cell.lock()));
                }
                ExecutionStatus::Pending if session.is_none() => {
                    followups.extend(self.start_execution(cell.id));
                }
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

    /// Takes up a running execution's kept lease when it belongs to its newest dispatch (the
    /// sweep reclaims it if it expired meanwhile); without one, [`Self::redispatch`].
    fn take_up(&self, cell: &ExecCell, kept: Option<HeldLease>) -> Followups {
        let mut state = cell.lock();
        match kept {
            Some(held) if fits(&state, &held) => {
                tracing::info!(
                    execution = %cell.id, dispatch = %held.dispatch_id, attempt = held.attempt,
                    "lease kept across the restart"
                );
                state.adopt_lease(held);
                drop(state);
                self.store().mark_live(cell.id);
                Followups::default()
            }
            _ => self.redispatch(&mut state),
        }
    }

    /// Retires a running execution's dispatches (`dispatch.reclaimed`, `kernel_restart`) and
    /// queues a fresh one.
    fn redispatch(&self, state: &mut ExecState) -> Followups {
        let id = state.exec.id;
        if let Some((dispatch, attempt)) = last_dispatch(state) {
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
        state.retire_dispatches();
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
        let leases = self.recorder().leases.clone();
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
                let (journal, registry, leases) =
                    (journal.clone(), registry.clone(), leases.clone());
                // fsync blocks: off the async workers (and outside the write locks).
                let synced = tokio::task::spawn_blocking(move || {
                    if let Some(journal) = journal
                        && let Err(error) = journal.sync()
                    {
                        tracing::error!(%error, "cannot sync the event log");
                    }
                    if let Some(registry) = registry
                        && let Err(error) = registry.sync()
                    {
                        tracing::error!(%error, "cannot sync the registry");
                    }
                    if let Some(leases) = leases
                        && let Err(error) = leases.sync()
                    {
                        tracing::error!(%error, "cannot sync the leases");
                    }
                });
                let _ = synced.await;
                if stop {
                    return;
                }
            }
        });
    }
}

/// Whether a kept lease agrees with the recovered log: it holds the newest dispatch, and every
/// occurrence it counts is a step the log has (each counted submission named a recorded step).
/// A lease written after a batch the crash tore off does not fit, and is not taken up.
fn fits(state: &ExecState, held: &HeldLease) -> bool {
    if last_dispatch(state).map(|(id, _)| id) != Some(held.dispatch_id) {
        return false;
    }
    let execution = state.exec.id.to_string();
    held.counts.iter().all(|(kind, target, args_hash, n)| {
        (0..*n).all(|occurrence| {
            let id = crate::identity::step_id(&execution, kind, target, args_hash, occurrence);
            state.steps.contains_key(&id)
        })
    })
}

/// The newest dispatch of a recovered log and the highest attempt it reached.
fn last_dispatch(state: &ExecState) -> Option<(Uuid, u32)> {
    let mut last: Option<(Uuid, u32)> = None;
    for event in &state.events {
        let (acked, change) = match &event.body {
            EventBody::DispatchAcked(change) => (true, change),
            EventBody::DispatchQueued(change)
            | EventBody::DispatchFailed(change)
            | EventBody::DispatchReclaimed(change) => (false, change),
            _ => continue,
        };
        last = match last {
            // An ack may be recorded after a newer dispatch was queued (the agent's answer
            // came back after the run blocked and resumed): it never makes its dispatch newest.
            _ if acked && last.is_some_and(|(id, _)| id != change.dispatch_id) => last,
            Some((id, attempt)) if id == change.dispatch_id => {
                Some((id, attempt.max(change.attempt)))
            }
            _ => Some((change.dispatch_id, change.attempt)),
        };
    }
    last
}
