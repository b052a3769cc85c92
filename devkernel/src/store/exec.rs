//! One execution's state: the event log and the projections derived from it, behind one lock.

use std::collections::{BTreeMap, HashMap};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use uuid::Uuid;

use super::leases::{Count, HeldLease, Lease, LeaseBook};
use super::{Batch, Dispatch, DispatchStatus, Journal, Resource};
use crate::clock::Clock;
use crate::error::KernelError;
use crate::event::{Created, DispatchChanged, DispatchState, EventBody, Recorded, private};
use crate::model::{ApprovalRow, ExecutionRow, StepRow};
use crate::policy::Policy;
use rebuno::wire::ExecutionStatus;

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
    /// The newest event's seq, for waiters on the log.
    seq: watch::Sender<u64>,
    /// Live step deltas (SSE frames), created on first use.
    deltas: OnceLock<broadcast::Sender<Arc<str>>>,
}

/// An execution's lock; dropping it writes what was recorded under it to the journal and
/// tells waiters on the log how far it reaches.
#[derive(Debug)]
pub(crate) struct StateGuard<'a>(MutexGuard<'a, ExecState>, &'a watch::Sender<u64>);

impl Deref for StateGuard<'_> {
    type Target = ExecState;

    fn deref(&self) -> &ExecState {
        &self.0
    }
}

impl DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut ExecState {
        &mut self.0
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        self.0.flush();
        self.0.note_lease();
        send_if_changed(self.1, self.0.latest_seq());
    }
}

/// Per-subscriber buffer of live deltas; older frames are dropped when it is full.
const DELTA_BUFFER: usize = 64;

impl ExecCell {
    /// Wraps a fresh state.
    pub(crate) fn new(mut state: ExecState) -> Self {
        state.flush();
        let (status, _) = watch::channel(state.exec.status);
        let (seq, _) = watch::channel(state.latest_seq());
        Self {
            id: state.exec.id,
            agent_id: state.exec.agent_id.clone(),
            state: Mutex::new(state),
            status,
            seq,
            deltas: OnceLock::new(),
        }
    }

    /// Locks the execution for a mutation or a consistent read. Releasing the lock writes
    /// the events recorded under it to the journal, as one batch.
    pub(crate) fn lock(&self) -> StateGuard<'_> {
        StateGuard(super::lock(&self.state), &self.seq)
    }

    /// Publishes the current status to watchers. Call after a mutation, with the lock
    /// released: the status is read and sent under the lock, so the last publish always
    /// carries the newest status. (Waiters on the log need no call: every lock sends the
    /// newest seq when it is released.)
    pub(crate) fn publish(&self) {
        let state = self.lock();
        send_if_changed(&self.status, state.exec.status);
        drop(state);
    }

    /// Watches the newest event's seq. Never hold a borrow of it while locking the execution:
    /// the lock's release sends to it.
    pub(crate) fn subscribe_seq(&self) -> watch::Receiver<u64> {
        self.seq.subscribe()
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

    /// Watches the status. Never hold a borrow of it (`wait_for`'s guard included) while
    /// locking the execution: [`publish`](Self::publish) sends under that lock.
    pub(crate) fn subscribe(&self) -> watch::Receiver<ExecutionStatus> {
        self.status.subscribe()
    }
}

/// Where recorded events go besides memory: the clock that stamps them and, with a data
/// directory, the on-disk journal.
#[derive(Debug, Clone, Default)]
pub(crate) struct Recorder {
    /// Stamps every event.
    pub(crate) clock: Clock,
    /// Persists every event, when the kernel has a data directory.
    pub(crate) journal: Option<Arc<Journal<Batch>>>,
    /// Persists every lease, when the kernel has a data directory.
    pub(crate) leases: Option<Arc<LeaseBook>>,
}

/// An execution's projections: everything the event log determines. Outside the store
/// they are read-only (through `Deref` on [`ExecState`]); [`ExecState::record`] is the only
/// way to change them, by appending an event that [`super::apply`] folds in.
#[derive(Debug)]
pub(crate) struct Projection {
    /// The execution projection.
    pub(crate) exec: ExecutionRow,
    /// Append-only log, seq = index + 1.
    pub(crate) events: Vec<Recorded>,
    /// Steps by id (ordered by id, as the API lists them).
    pub(crate) steps: BTreeMap<String, StepRow>,
    /// `state` stored at completion.
    pub(crate) state: Option<Value>,
    /// Approvals of this execution.
    pub(crate) approvals: BTreeMap<Uuid, ApprovalRow>,
    /// Registered resources by key.
    pub(crate) resources: BTreeMap<String, Resource>,
    /// Execution-specific policy bundle (a fork override or inherited from the source).
    pub(crate) policy: Option<Arc<Policy>>,
}

/// Everything about one execution: the projections of its log, and the delivery machinery
/// (dispatch rows, leases, occurrence counters), which is runtime state the log records but
/// a restart rebuilds by reclaiming.
#[derive(Debug)]
pub(crate) struct ExecState {
    pub(super) view: Projection,
    recorder: Recorder,
    /// Events recorded since the lock was taken, as comma-separated JSON, not yet journaled.
    unwritten: Vec<u8>,
    /// Dispatches, oldest first.
    pub(crate) dispatches: Vec<Dispatch>,
    /// Occurrence counters of the live attempts.
    pub(crate) counters: HashMap<OccurrenceKey, u32>,
    /// Subagents spawned by this execution's steps: step id → child execution (an index of
    /// the children's own `execution.created` events).
    pub(crate) children: HashMap<String, Uuid>,
    /// Whether a rate limit already parked this execution once.
    pub(crate) parked: bool,
}

impl Deref for ExecState {
    type Target = Projection;

    fn deref(&self) -> &Projection {
        &self.view
    }
}

impl ExecState {
    /// A new execution: its log starts with `execution.created` (and `extra`, e.g. a fork's
    /// `execution.forked`).
    pub(crate) fn create(exec: ExecutionRow, recorder: Recorder) -> Self {
        let created = EventBody::ExecutionCreated(Created::of(&exec));
        let mut state = Self::empty(exec, recorder);
        state.record(created);
        state
    }

    /// Rebuilds an execution by applying a persisted log, oldest first; `None` when the log
    /// does not start with an `execution.created` carrying the execution.
    pub(crate) fn rebuild(log: Vec<Recorded>, recorder: Recorder) -> Option<Self> {
        let first = log.first()?;
        let EventBody::ExecutionCreated(Created {
            execution: Some(exec),
            ..
        }) = &first.body
        else {
            return None;
        };
        let mut state = Self::empty((**exec).clone(), recorder);
        for entry in log {
            if entry.event_seq != state.latest_seq() + 1 {
                tracing::error!(
                    execution = %entry.execution_id, seq = entry.event_seq,
                    "event log out of sequence (two kernels on one data directory?); \
                     the rest of this execution's log is ignored"
                );
                break;
            }
            super::apply::apply(&mut state.view, &entry);
            state.view.events.push(entry);
        }
        Some(state)
    }

    fn empty(exec: ExecutionRow, recorder: Recorder) -> Self {
        Self {
            view: Projection {
                exec,
                events: Vec::new(),
                steps: BTreeMap::new(),
                state: None,
                approvals: BTreeMap::new(),
                resources: BTreeMap::new(),
                policy: None,
            },
            recorder,
            unwritten: Vec::new(),
            dispatches: Vec::new(),
            counters: HashMap::new(),
            children: HashMap::new(),
            parked: false,
        }
    }

    /// Appends an event, applies it to the projections and returns its seq.
    pub(crate) fn record(&mut self, body: EventBody) -> u64 {
        let entry = Recorded {
            execution_id: self.view.exec.id,
            event_seq: self.latest_seq() + 1,
            body,
            occurred_at: self.recorder.clock.timestamp(),
        };
        let seq = entry.event_seq;
        super::apply::apply(&mut self.view, &entry);
        if self.recorder.journal.is_some() {
            self.stage(&entry);
        }
        self.view.events.push(entry);
        seq
    }

    /// Adds an event to the batch the lock's release journals.
    fn stage(&mut self, entry: &Recorded) {
        match private::stored(|| serde_json::to_vec(entry)) {
            Ok(json) => {
                self.unwritten.push(if self.unwritten.is_empty() {
                    b'['
                } else {
                    b','
                });
                self.unwritten.extend_from_slice(&json);
            }
            Err(error) => tracing::error!(%error, "cannot encode an event for the journal"),
        }
    }

    /// Journals the events recorded since the last flush, as one line.
    pub(super) fn flush(&mut self) {
        if self.unwritten.is_empty() {
            return;
        }
        let mut line = std::mem::take(&mut self.unwritten);
        line.push(b']');
        if let Some(journal) = &self.recorder.journal {
            journal.append_line(line);
        }
    }

    /// Appends several events in order.
    pub(crate) fn record_all(&mut self, bodies: impl IntoIterator<Item = EventBody>) {
        for body in bodies {
            self.record(body);
        }
    }

    /// The execution's clock.
    pub(crate) fn clock(&self) -> &Clock {
        &self.recorder.clock
    }

    /// Enqueues a new dispatch due at `due` and writes `dispatch.queued`; returns its id.
    pub(crate) fn enqueue_dispatch(&mut self, due: Instant) -> Uuid {
        let dispatch = Dispatch::new(due);
        let id = dispatch.id;
        self.dispatches.push(dispatch);
        self.record(EventBody::DispatchQueued(DispatchChanged::new(
            id,
            self.view.exec.id,
            DispatchState::Pending,
            0,
        )));
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
    pub(crate) fn renew_lease(&mut self, lease: Lease) -> Result<(), KernelError> {
        let (now, wall) = (self.recorder.clock.now(), self.recorder.clock.timestamp());
        match self.dispatch_mut(lease.dispatch_id) {
            Some(d) if d.attempt == lease.attempt && d.status == DispatchStatus::InFlight => {
                d.lock_at(now, wall);
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
        self.view.events.len() as u64
    }

    /// The lease the in-flight dispatch holds, with its attempt's occurrence counts (`None`
    /// when none is in flight, or the execution ended).
    fn held_lease(&self) -> Option<HeldLease> {
        if self.view.exec.status.is_terminal() {
            return None;
        }
        let d = self
            .dispatches
            .iter()
            .find(|d| d.status == DispatchStatus::InFlight)?;
        let mut counts: Vec<Count> = self
            .counters
            .iter()
            .filter(|(key, _)| key.0 == d.id && key.1 == d.attempt)
            .map(|(key, n)| (key.2.clone(), key.3.clone(), key.4.clone(), *n))
            .collect();
        counts.sort();
        Some(HeldLease {
            dispatch_id: d.id,
            attempt: d.attempt,
            lease_ms: u64::try_from(d.lease.as_millis()).unwrap_or(u64::MAX),
            expires_at: d.expires_wall?,
            counts,
        })
    }

    /// Writes the lease to the data directory's lease book, when there is one.
    fn note_lease(&self) {
        if let Some(book) = &self.recorder.leases {
            book.note(self.view.exec.id, self.held_lease());
        }
    }

    /// Takes up a lease a data directory kept across a restart: the dispatch is in flight
    /// again under the same attempt with the counts it had, and expires when it would have
    /// (at once when that time has passed, so the sweep reclaims it as any expired lease).
    pub(crate) fn adopt_lease(&mut self, held: HeldLease) {
        let (now, wall) = (self.recorder.clock.now(), self.recorder.clock.timestamp());
        let lease = Duration::from_millis(held.lease_ms);
        let left_nanos = held.expires_at.unix_nanos() - wall.unix_nanos();
        let left = u64::try_from(left_nanos).map_or(Duration::ZERO, Duration::from_nanos);
        let mut dispatch = Dispatch::new(now);
        dispatch.id = held.dispatch_id;
        dispatch.status = DispatchStatus::InFlight;
        dispatch.attempt = held.attempt;
        dispatch.lease = lease;
        dispatch.locked_at = now.checked_sub(lease.saturating_sub(left)).unwrap_or(now);
        dispatch.expires_wall = Some(held.expires_at);
        for (kind, target, args_hash, n) in held.counts {
            let key = (held.dispatch_id, held.attempt, kind, target, args_hash);
            self.counters.insert(key, n);
        }
        self.dispatches.push(dispatch);
    }

    /// Whether any dispatch is still pending, failed or in flight.
    pub(crate) fn has_live_dispatch(&self) -> bool {
        self.dispatches
            .iter()
            .any(|d| d.status != DispatchStatus::Exhausted)
    }
}

/// Sends `value` to a watch if it differs from the current one.
fn send_if_changed<T: PartialEq>(sender: &watch::Sender<T>, value: T) {
    sender.send_if_modified(|current| {
        let changed = *current != value;
        *current = value;
        changed
    });
}
