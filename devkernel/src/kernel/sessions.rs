//! Session admission: executions of one session run one at a time (PROTOCOL.md §1.7).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use uuid::Uuid;

use crate::store::lock;
use rebuno::wire::ExecutionStatus;

/// One session's queue.
#[derive(Debug, Default)]
struct Session {
    /// The running or blocked execution holding the session.
    holder: Option<Uuid>,
    /// Pending executions, oldest first.
    queue: VecDeque<Uuid>,
    /// Every execution of the session, in creation order.
    members: Vec<Uuid>,
}

/// All sessions.
#[derive(Debug, Default)]
pub(super) struct Sessions {
    sessions: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    /// Whether the session has any execution.
    pub(super) fn exists(&self, name: &str) -> bool {
        lock(&self.sessions)
            .get(name)
            .is_some_and(|s| !s.members.is_empty())
    }

    /// Adds `id` to the session; `true` when it holds the session and may start now.
    pub(super) fn admit(&self, name: &str, id: Uuid) -> bool {
        let mut sessions = lock(&self.sessions);
        let session = sessions.entry(name.to_owned()).or_default();
        session.members.push(id);
        if session.holder.is_none() {
            session.holder = Some(id);
            true
        } else {
            session.queue.push_back(id);
            false
        }
    }

    /// Releases the session held by `id`; returns the next execution to start, if any.
    pub(super) fn release(&self, name: &str, id: Uuid) -> Option<Uuid> {
        let mut sessions = lock(&self.sessions);
        let session = sessions.get_mut(name)?;
        session.queue.retain(|queued| *queued != id);
        if session.holder != Some(id) {
            return None;
        }
        session.holder = session.queue.pop_front();
        session.holder
    }

    /// Re-adds a recovered execution (oldest first): a running or blocked one holds the
    /// session, a pending one queues, an ended one is only a member. Returns whether `id`
    /// now holds the session.
    pub(super) fn restore(&self, name: &str, id: Uuid, status: ExecutionStatus) -> bool {
        let mut sessions = lock(&self.sessions);
        let session = sessions.entry(name.to_owned()).or_default();
        session.members.push(id);
        match status {
            ExecutionStatus::Running | ExecutionStatus::Blocked => session.holder = Some(id),
            ExecutionStatus::Pending => session.queue.push_back(id),
            _ => {}
        }
        session.holder == Some(id)
    }

    /// Hands a session without a holder to its oldest queued execution; returns it.
    pub(super) fn admit_next(&self, name: &str) -> Option<Uuid> {
        let mut sessions = lock(&self.sessions);
        let session = sessions.get_mut(name)?;
        if session.holder.is_none() {
            session.holder = session.queue.pop_front();
            return session.holder;
        }
        None
    }

    /// The executions of a session, oldest first.
    pub(super) fn members(&self, name: &str) -> Vec<Uuid> {
        lock(&self.sessions)
            .get(name)
            .map(|s| s.members.clone())
            .unwrap_or_default()
    }

    /// Drops deleted (ended) executions from a session; a session left without any is gone.
    pub(super) fn forget(&self, name: &str, ids: &std::collections::HashSet<Uuid>) {
        let mut sessions = lock(&self.sessions);
        if let Some(session) = sessions.get_mut(name) {
            session.members.retain(|id| !ids.contains(id));
            session.queue.retain(|id| !ids.contains(id));
            if session.members.is_empty() {
                sessions.remove(name);
            }
        }
    }
}
