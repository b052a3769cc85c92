//! One execution's state: the event log and the projections derived from it, behind one lock.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use uuid::Uuid;

use super::{Dispatch, DispatchStatus, Resource};
use crate::error::KernelError;
use crate::kernel::Lease;
use crate::model::{Approval, Event, Execution, ExecutionStatus, StepRecord, Timestamp};
use crate::policy::Policy;

/// Occurrence counter key: (dispatch, attempt, kind, target, args_hash).
pub(crate) type OccurrenceKey = (Uuid, u32, String, String, String);

/// An execution and its lock.
#[derive(Debug)]
pub(crate) struct ExecCell {
    /// Execution id (immutable).
    pub(crate) id: Uuid,
    /// Owning agent (immutable), for ownership checks.
    pub(crate) agent_id: String,
    state: Mutex<ExecState>,
    status: watch::Sender<ExecutionStatus>,
    /// Live step deltas (SSE frames), created on first use.
    deltas: OnceLock<broadcast::Sender<Arc<str>>>,
}

/// Per-subscriber buffer of live deltas; older frames are dropped when it is full.
const DELTA_BUFFER: usize = 64;

impl ExecCell {
    /// Wraps a fresh state.
    pub(crate) fn new(state: ExecState) -> Self {
        let (status, _) = watch::channel(state.exec.status);
        Self {
            id: state.exec.id,
            agent_id: state.exec.agent_id.clone(),
            state: Mutex::new(state),
            status,
            deltas: OnceLock::new(),
        }
    }

    /// Locks the execution for a mutation or a consistent read.
    pub(crate) fn lock(&self) -> MutexGuard<'_, ExecState> {
        super::lock(&self.state)
    }

    /// Publishes the current status to watchers. Call after a mutation, with the lock
    /// released: the status is read and sent under the lock, so the last publish always
    /// carries the newest status.
    pub(crate) fn publish(&self) {
        let state = self.lock();
        let status = state.exec.status;
        self.status.send_if_modified(|current| {
            let changed = *current != status;
            *current = status;
            changed
        });
        drop(state);
    }

    /// Subscribes to live step deltas.
    pub(crate) fn subscribe_deltas(&self) -> broadcast::Receiver<Arc<str>> {
        self.deltas
            .get_or_init(|| broadcast::channel(DELTA_BUFFER).0)
            .subscribe()
    }

    /// Sends a delta frame to current subscribers (none listening is fine).
    pub(crate) fn send_delta(&self, frame: Arc<str>) {
        if let Some(sender) = self.deltas.get() {
            let _ = sender.send(frame);
        }
    }

    /// Watches the status.
    pub(crate) fn subscribe(&self) -> watch::Receiver<ExecutionStatus> {
        self.status.subscribe()
    }
}

/// Everything about one execution.
#[derive(Debug)]
pub(crate) struct ExecState {
    /// The execution projection.
    pub(crate) exec: Execution,
    /// Append-only log, seq = index + 1.
    pub(crate) events: Vec<Event>,
    /// Steps by id (ordered by id, as the API lists them).
    pub(crate) steps: BTreeMap<String, StepRecord>,
    /// Dispatches, oldest first.
    pub(crate) dispatches: Vec<Dispatch>,
    /// Occurrence counters of the live attempts.
    pub(crate) counters: HashMap<OccurrenceKey, u32>,
    /// `state` stored at completion.
    pub(crate) state: Option<Value>,
    /// Approvals of this execution.
    pub(crate) approvals: BTreeMap<Uuid, Approval>,
    /// Subagents spawned by this execution's steps: step id → child execution.
    pub(crate) children: HashMap<String, Uuid>,
    /// Whether a rate limit already parked this execution once.
    pub(crate) parked: bool,
    /// Registered resources by key.
    pub(crate) resources: BTreeMap<String, Resource>,
    /// Execution-specific policy bundle (a fork override or inherited from the source).
    pub(crate) policy: Option<Arc<Policy>>,
}

impl ExecState {
    /// A fresh state for `exec` with an empty log.
    pub(crate) fn new(exec: Execution) -> Self {
        Self {
            exec,
            events: Vec::new(),
            steps: BTreeMap::new(),
            dispatches: Vec::new(),
            counters: HashMap::new(),
            state: None,
            approvals: BTreeMap::new(),
            children: HashMap::new(),
            parked: false,
            resources: BTreeMap::new(),
            policy: None,
        }
    }

    /// Appends an event and returns its seq.
    pub(crate) fn append(&mut self, kind: &str, payload: Value) -> u64 {
        let seq = self.events.len() as u64 + 1;
        self.events.push(Event {
            execution_id: self.exec.id,
            event_seq: seq,
            kind: kind.to_owned(),
            payload,
            occurred_at: Timestamp::now(),
        });
        seq
    }

    /// Sets the status and `updated_at`.
    pub(crate) fn set_status(&mut self, status: ExecutionStatus) {
        self.exec.status = status;
        self.exec.updated_at = Timestamp::now();
    }

    /// The standard `execution.*` payload.
    pub(crate) fn status_payload(&self, status: ExecutionStatus) -> serde_json::Map<String, Value> {
        let mut map = serde_json::Map::new();
        map.insert("execution_id".into(), json!(self.exec.id));
        map.insert("status".into(), json!(status.as_str()));
        map
    }

    /// Enqueues a new dispatch due now and writes `dispatch.queued`; returns its id.
    pub(crate) fn enqueue_dispatch(&mut self, due: Instant) -> Uuid {
        let dispatch = Dispatch::new(due);
        let payload = dispatch.payload(self.exec.id, "pending");
        let id = dispatch.id;
        self.dispatches.push(dispatch);
        self.append("dispatch.queued", payload);
        id
    }

    /// Retires every dispatch (terminal, block, suspend).
    pub(crate) fn retire_dispatches(&mut self) {
        for dispatch in &mut self.dispatches {
            dispatch.status = DispatchStatus::Exhausted;
        }
        let live: Vec<Uuid> = self.dispatches.iter().map(|d| d.id).collect();
        self.counters.retain(|key, _| !live.contains(&key.0));
    }

    /// A dispatch of this execution.
    pub(crate) fn dispatch_mut(&mut self, id: Uuid) -> Option<&mut Dispatch> {
        self.dispatches.iter_mut().find(|d| d.id == id)
    }

    /// Fences a mutation: the lease must be the live in-flight attempt; renews it.
    pub(crate) fn renew_lease(&mut self, lease: Lease, now: Instant) -> Result<(), KernelError> {
        match self.dispatch_mut(lease.dispatch_id) {
            Some(d) if d.attempt == lease.attempt && d.status == DispatchStatus::InFlight => {
                d.locked_at = now;
                Ok(())
            }
            _ => Err(KernelError::LeaseSuperseded),
        }
    }

    /// Checks a lease without renewing it: same dispatch and attempt, any status.
    pub(crate) fn check_lease(&self, lease: Lease) -> Result<(), KernelError> {
        match self.dispatches.iter().find(|d| d.id == lease.dispatch_id) {
            Some(d) if d.attempt == lease.attempt => Ok(()),
            _ => Err(KernelError::LeaseSuperseded),
        }
    }

    /// Seq of the newest event (0 when the log is empty).
    pub(crate) fn latest_seq(&self) -> u64 {
        self.events.len() as u64
    }

    /// Whether any dispatch is still pending, failed or in flight.
    pub(crate) fn has_live_dispatch(&self) -> bool {
        self.dispatches
            .iter()
            .any(|d| d.status != DispatchStatus::Exhausted)
    }
}
