//! The leases of `rebuno-dev --data-dir` (`leases.jsonl`): which attempt holds each running
//! execution's dispatch, until when, and the occurrence counts it has used, so a restarted
//! kernel keeps a live agent's dispatch as the Go kernel does (its leases are rows with an
//! expiry in Postgres) instead of reclaiming it. Only leases that really expired are taken back,
//! by the sweep, as after any expiry.
//!
//! The event log cannot rebuild this: a claim, a heartbeat and a replayed submission write no
//! event. So each critical section that changes an execution's lease appends the execution's
//! whole lease as one line (the newest line of an execution wins; `held: null` when it holds
//! none), in the same release of the lock that journals its events. Opening the file keeps the
//! last line of each execution that still holds a lease and rewrites the file with only those.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::journal::{Journal, Line};
use crate::model::Timestamp;

/// The dispatch lease an agent mutation carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lease {
    /// `Rebuno-Dispatch-Id`.
    pub(crate) dispatch_id: Uuid,
    /// `Rebuno-Dispatch-Attempt`.
    pub(crate) attempt: u32,
}

/// One occurrence count of a live attempt: kind, target, args hash and how many were recorded.
pub(crate) type Count = (String, String, String, u32);

/// The lease an execution's in-flight dispatch holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HeldLease {
    /// The dispatch in flight.
    pub(crate) dispatch_id: Uuid,
    /// Its attempt: the only one whose writes are accepted.
    pub(crate) attempt: u32,
    /// The lease period, in milliseconds.
    pub(crate) lease_ms: u64,
    /// When the lease runs out unless renewed (wall clock).
    pub(crate) expires_at: Timestamp,
    /// The occurrence counts of this attempt, sorted.
    pub(crate) counts: Vec<Count>,
}

/// One line of the file: an execution's lease as it now stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LeaseLine {
    execution_id: Uuid,
    held: Option<HeldLease>,
}

impl Line for LeaseLine {
    const FILE: &'static str = "leases.jsonl";
    const NOUN: &'static str = "lease";
    const PRIVATE: bool = false;
}

/// The leases file and the newest lease written for each execution.
#[derive(Debug)]
pub(crate) struct LeaseBook {
    journal: Journal<LeaseLine>,
    written: Mutex<HashMap<Uuid, HeldLease>>,
}

impl LeaseBook {
    /// Opens (creating) `dir/leases.jsonl`, compacted to the leases still held; returns them.
    pub(crate) fn open(dir: &Path) -> io::Result<(Self, HashMap<Uuid, HeldLease>)> {
        let (journal, lines) = Journal::<LeaseLine>::open(dir)?;
        drop(journal);
        let mut held = HashMap::new();
        for line in lines {
            match line.held {
                Some(lease) => held.insert(line.execution_id, lease),
                None => held.remove(&line.execution_id),
            };
        }
        compact(dir, &held)?;
        let (journal, _) = Journal::<LeaseLine>::open(dir)?;
        let book = Self {
            journal,
            written: Mutex::new(held.clone()),
        };
        Ok((book, held))
    }

    /// Writes an execution's lease when it differs from the one last written.
    pub(crate) fn note(&self, execution_id: Uuid, held: Option<HeldLease>) {
        let mut written = super::lock(&self.written);
        if written.get(&execution_id) == held.as_ref() {
            return;
        }
        self.journal.append(&LeaseLine {
            execution_id,
            held: held.clone(),
        });
        match held {
            Some(lease) => written.insert(execution_id, lease),
            None => written.remove(&execution_id),
        };
    }

    /// Flushes written leases to the disk (see [`Journal::sync`]).
    pub(crate) fn sync(&self) -> io::Result<()> {
        self.journal.sync()
    }
}

/// Replaces the file by one line per held lease (written aside, then renamed over it).
fn compact(dir: &Path, held: &HashMap<Uuid, HeldLease>) -> io::Result<()> {
    let mut text = Vec::new();
    for (execution_id, lease) in held {
        let line = LeaseLine {
            execution_id: *execution_id,
            held: Some(lease.clone()),
        };
        serde_json::to_writer(&mut text, &line)?;
        text.push(b'\n');
    }
    let aside = dir.join(format!("{}.compacting", LeaseLine::FILE));
    std::fs::write(&aside, text)?;
    std::fs::rename(aside, dir.join(LeaseLine::FILE))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(attempt: u32) -> HeldLease {
        HeldLease {
            dispatch_id: Uuid::now_v7(),
            attempt,
            lease_ms: 30_000,
            expires_at: Timestamp::now(),
            counts: vec![("tool_call".into(), "t".into(), "h".into(), 2)],
        }
    }

    #[test]
    fn the_newest_lease_of_each_execution_comes_back_and_released_ones_do_not() {
        let dir = std::env::temp_dir().join(format!("rebuno-leases-{}", Uuid::now_v7()));
        let (kept, released) = (Uuid::now_v7(), Uuid::now_v7());
        let (book, none) = LeaseBook::open(&dir).unwrap();
        assert!(none.is_empty());
        book.note(kept, Some(lease(1)));
        book.note(released, Some(lease(1)));
        book.note(kept, Some(lease(2)));
        book.note(released, None);
        let newest = lease(3);
        book.note(kept, Some(newest.clone()));
        drop(book);
        let (book, back) = LeaseBook::open(&dir).unwrap();
        assert_eq!(back, HashMap::from([(kept, newest.clone())]));
        // Compacted: one line per held lease, and an unchanged lease writes nothing.
        book.note(kept, Some(newest));
        let text = std::fs::read_to_string(dir.join(LeaseLine::FILE)).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
