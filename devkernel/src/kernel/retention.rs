//! Retention, as the Go kernel's periodic cleanup: an ended execution created longer ago than
//! `execution_retention` is deleted with everything it owns (events, steps, approvals,
//! dispatches, resources), unless its session still has an execution that is not ended or not
//! that old: a session goes as a whole. Running, blocked and pending executions are never
//! deleted, however old (Go: `TestConcurrencyRetentionPreservesNonterminalExecutions`). A pass
//! runs from the sweep once every `retention_interval` of the kernel's clock.
//!
//! With `--data-dir` each pass appends the ids it deleted to `deletions.jsonl` before they leave
//! memory. Opening the data directory drops their events and rewrites `events.jsonl` without
//! them (aside, then renamed over it), then empties `deletions.jsonl`: a restarted kernel never
//! rebuilds a deleted execution, and the event log shrinks to what is kept.

use std::collections::{HashMap, HashSet};
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use uuid::Uuid;

use super::Kernel;
use crate::model::Timestamp;
use crate::store::{Batch, ExecCell, Journal, Line, lock};

/// One line of `deletions.jsonl`: the executions one retention pass deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Deletions {
    /// When the pass ran (wall clock).
    deleted_at: Timestamp,
    /// The executions it deleted.
    execution_ids: Vec<Uuid>,
}

impl Line for Deletions {
    const FILE: &'static str = "deletions.jsonl";
    const NOUN: &'static str = "deletion record";
    const PRIVATE: bool = false;
}

/// When retention last ran, and where its deletions persist.
#[derive(Debug)]
pub(super) struct Retention {
    /// When the last pass ran (the kernel's start before the first), on the kernel's clock.
    last: Mutex<Instant>,
    /// `deletions.jsonl`, with a data directory.
    log: Option<Arc<Journal<Deletions>>>,
}

impl Retention {
    /// Retention state of a kernel started at `now` (the first pass is one interval later).
    pub(super) fn new(now: Instant, log: Option<Arc<Journal<Deletions>>>) -> Self {
        Self {
            last: Mutex::new(now),
            log,
        }
    }
}

/// Opens the event log of `dir` without the executions retention deleted: their events are
/// dropped and the file rewritten without them before it is opened for appending; the deletion
/// record is then emptied. Returns the event log, the batches it holds and the deletion record.
pub(super) fn open_event_log(
    dir: &Path,
) -> io::Result<(Journal<Batch>, Vec<Batch>, Journal<Deletions>)> {
    let (deletions, records) = Journal::<Deletions>::open(dir)?;
    let gone: HashSet<Uuid> = records
        .into_iter()
        .flat_map(|record| record.execution_ids)
        .collect();
    let (journal, batches) = Journal::<Batch>::open(dir)?;
    if gone.is_empty() {
        return Ok((journal, batches, deletions));
    }
    drop((journal, deletions));
    let kept: Vec<Batch> = batches
        .into_iter()
        .filter_map(|Batch(events)| {
            let events: Vec<_> = events
                .into_iter()
                .filter(|event| !gone.contains(&event.execution_id))
                .collect();
            (!events.is_empty()).then_some(Batch(events))
        })
        .collect();
    rewrite(dir, &kept)?;
    rewrite::<Deletions>(dir, &[])?;
    tracing::info!(
        executions = gone.len(),
        "event log compacted: deleted executions dropped"
    );
    let (journal, batches) = Journal::<Batch>::open(dir)?;
    let (deletions, _) = Journal::<Deletions>::open(dir)?;
    Ok((journal, batches, deletions))
}

/// Replaces `dir/<T::FILE>` by `records`: written aside (with the file's mode), flushed to the
/// disk, then renamed over it, so a crash leaves either the old file or the new one.
fn rewrite<T: Line>(dir: &Path, records: &[T]) -> io::Result<()> {
    let aside = dir.join(format!("{}.compacting", T::FILE));
    let mut options = OpenOptions::new();
    options.create(true).write(true).truncate(true);
    #[cfg(unix)]
    if T::PRIVATE {
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    }
    let mut file = io::BufWriter::new(options.open(&aside)?);
    for record in records {
        let mut line = record.encode().map_err(io::Error::other)?;
        line.push(b'\n');
        file.write_all(&line)?;
    }
    file.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&aside, dir.join(T::FILE))?;
    std::fs::File::open(dir).and_then(|d| d.sync_all()).ok();
    Ok(())
}

impl Kernel {
    /// Runs a retention pass when one is due: every `retention_interval` of the kernel's
    /// clock, unless retention is off (`execution_retention` zero). Returns once the pass
    /// due now, whoever runs it, is done.
    pub(super) fn retain(&self) {
        let retention = self.config().execution_retention;
        if retention.is_zero() {
            return;
        }
        let now = self.clock().now();
        // Held for the whole pass: a sweep that finds one running waits for it to finish.
        let mut last = lock(&self.inner.retention.last);
        if now.saturating_duration_since(*last) < self.config().retention_interval {
            return;
        }
        *last = now;
        let expired = self.expired(self.clock().timestamp(), retention);
        self.delete(expired);
        drop(last);
    }

    /// The executions retention deletes at `now`: ended and created more than `retention`
    /// ago, with no execution of their session that is still going or younger.
    fn expired(
        &self,
        now: Timestamp,
        retention: std::time::Duration,
    ) -> Vec<(Arc<ExecCell>, Option<String>)> {
        let mut kept_sessions = HashSet::new();
        let mut candidates = Vec::new();
        for cell in self.store().executions_desc() {
            let (old_and_ended, session) = {
                let state = cell.lock();
                let exec = &state.exec;
                let old = exec.created_at.plus(retention) < now;
                (old && exec.status.is_terminal(), exec.session.clone())
            };
            if old_and_ended {
                candidates.push((cell, session));
            } else if let Some(session) = session {
                kept_sessions.insert(session);
            }
        }
        candidates.retain(|(_, session)| {
            session
                .as_ref()
                .is_none_or(|name| !kept_sessions.contains(name))
        });
        candidates
    }

    /// Deletes executions: recorded as deleted first (with a data directory), then gone from
    /// the store, its indexes and their sessions.
    fn delete(&self, expired: Vec<(Arc<ExecCell>, Option<String>)>) {
        if expired.is_empty() {
            return;
        }
        let ids: HashSet<Uuid> = expired.iter().map(|(cell, _)| cell.id).collect();
        if let Some(log) = &self.inner.retention.log {
            log.append(&Deletions {
                deleted_at: self.clock().timestamp(),
                execution_ids: expired.iter().map(|(cell, _)| cell.id).collect(),
            });
            if let Err(error) = log.sync() {
                tracing::error!(%error, "cannot sync the deletion record");
            }
        }
        self.store().remove_executions(&ids);
        let mut by_session: HashMap<String, HashSet<Uuid>> = HashMap::new();
        for (cell, session) in expired {
            if let Some(name) = session {
                by_session.entry(name).or_default().insert(cell.id);
            }
        }
        for (name, members) in by_session {
            self.sessions().forget(&name, &members);
        }
        tracing::info!(executions = ids.len(), "retention deleted ended executions");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{DispatchChanged, DispatchState, EventBody, Recorded};

    fn event(execution_id: Uuid, seq: u64) -> Recorded {
        Recorded {
            execution_id,
            event_seq: seq,
            body: EventBody::DispatchQueued(DispatchChanged::new(
                Uuid::now_v7(),
                execution_id,
                DispatchState::Pending,
                0,
            )),
            occurred_at: Timestamp::now(),
        }
    }

    #[test]
    fn deleted_executions_leave_the_event_log_when_it_is_opened() {
        let dir = std::env::temp_dir().join(format!("rebuno-retention-{}", Uuid::now_v7()));
        let (kept, gone) = (Uuid::now_v7(), Uuid::now_v7());
        let (journal, _, deletions) = open_event_log(&dir).unwrap();
        journal.append(&Batch(vec![event(gone, 1), event(gone, 2)]));
        let kept_batch = Batch(vec![event(kept, 1)]);
        journal.append(&kept_batch);
        journal.append(&Batch(vec![event(gone, 3)]));
        deletions.append(&Deletions {
            deleted_at: Timestamp::now(),
            execution_ids: vec![gone],
        });
        drop((journal, deletions));

        let (journal, batches, _) = open_event_log(&dir).unwrap();
        assert_eq!(batches, vec![kept_batch]);
        // Compacted on disk: the deleted execution's lines and the record are gone, and the
        // log appends after what it kept.
        journal.append(&Batch(vec![event(kept, 2)]));
        drop(journal);
        let text = std::fs::read_to_string(dir.join(Batch::FILE)).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(!text.contains(&gone.to_string()), "{text}");
        let record = std::fs::read_to_string(dir.join(Deletions::FILE)).unwrap();
        assert!(record.is_empty(), "{record}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join(Batch::FILE))
                .unwrap()
                .permissions();
            assert_eq!(mode.mode() & 0o777, 0o600);
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
