//! The append-only files of `rebuno-dev --data-dir`: one JSON value per line, in the order
//! the kernel wrote them. [`Journal<Batch>`] is the event log (`events.jsonl`): each line is
//! the batch of events one critical section of one execution recorded (a JSON array),
//! private facts included, so an operation's events land together or not at all; the agent
//! and API key registry (`registry.jsonl`, [`super::registry`]) is a `Journal` of its own
//! records.
//!
//! A line is written to the file (one `write` call) before the operation that made it
//! answers, so killing the process loses nothing it acknowledged; a write that fails is cut
//! back off the file, so what is on disk always reads back. The file is `fsync`ed per batch
//! by [`Journal::sync`] (the kernel calls it every few milliseconds while there are unsynced
//! writes, outside the write lock), so a power cut loses at most that batch. On open, a torn
//! last line is dropped and the file truncated after the last whole one; a line that does not
//! parse before it is an error. One kernel process per data directory.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Seek, SeekFrom, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::event::{Recorded, private};

/// A kind of record a [`Journal`] holds, one per line.
pub(crate) trait Line: Serialize + DeserializeOwned {
    /// The file's name inside the data directory.
    const FILE: &'static str;
    /// What a record is called in log and error messages.
    const NOUN: &'static str;
    /// Whether the file is created readable and writable by its owner only (mode `0600` on
    /// Unix), for records that carry secrets.
    const PRIVATE: bool;

    /// The record's JSON form.
    fn encode(&self) -> serde_json::Result<Vec<u8>> {
        serde_json::to_vec(self)
    }
}

/// The events one critical section of one execution recorded, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(transparent)]
pub(crate) struct Batch(pub(crate) Vec<Recorded>);

/// A batch of the event log: written with its private facts. The file holds the inputs and
/// results of every step, so it is its owner's only too.
impl Line for Batch {
    const FILE: &'static str = "events.jsonl";
    const NOUN: &'static str = "batch of events";
    const PRIVATE: bool = true;

    fn encode(&self) -> serde_json::Result<Vec<u8>> {
        private::stored(|| serde_json::to_vec(self))
    }
}

/// The write end of a journal and the length of what it holds whole.
#[derive(Debug)]
struct Writer {
    file: File,
    len: u64,
}

/// An append-only file of `T` records.
#[derive(Debug)]
pub(crate) struct Journal<T> {
    path: PathBuf,
    file: Mutex<Writer>,
    /// The same file, for `fsync` without holding the write lock.
    syncer: File,
    dirty: AtomicBool,
    records: PhantomData<fn(&T)>,
}

impl<T: Line> Journal<T> {
    /// Opens (creating) `dir/<T::FILE>` and reads back every whole record in it.
    pub(crate) fn open(dir: &Path) -> io::Result<(Self, Vec<T>)> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(T::FILE);
        let mut options = OpenOptions::new();
        options.create(true).read(true).append(true);
        #[cfg(unix)]
        if T::PRIVATE {
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        }
        let mut file = options.open(&path)?;
        let (records, good) = read_all(&file, &path)?;
        if good < file.metadata()?.len() {
            tracing::warn!(path = %path.display(), "dropping a torn last {}", T::NOUN);
            file.set_len(good)?;
        }
        file.seek(SeekFrom::End(0))?;
        let syncer = file.try_clone()?;
        if let Some(parent) = path.parent() {
            // The file's directory entry survives a power cut too.
            File::open(parent).and_then(|d| d.sync_all()).ok();
        }
        let journal = Self {
            path,
            file: Mutex::new(Writer { file, len: good }),
            syncer,
            dirty: AtomicBool::new(false),
            records: PhantomData,
        };
        Ok((journal, records))
    }

    /// Appends one record as a line (a failure is logged).
    pub(crate) fn append(&self, record: &T) {
        match record.encode() {
            Ok(line) => self.append_line(line),
            Err(error) => {
                tracing::error!(path = %self.path.display(), %error, "cannot encode a {}", T::NOUN);
            }
        }
    }

    /// Appends `line` (a newline is added) in one write; a failed write is cut back off the
    /// file and logged, so the file stays readable.
    pub(crate) fn append_line(&self, mut line: Vec<u8>) {
        line.push(b'\n');
        let mut writer = super::lock(&self.file);
        match writer.file.write_all(&line) {
            Ok(()) => {
                writer.len += line.len() as u64;
                self.dirty.store(true, Ordering::Release);
            }
            Err(error) => {
                let good = writer.len;
                let cut = writer.file.set_len(good);
                tracing::error!(
                    path = %self.path.display(), %error, cut_back = cut.is_ok(),
                    "cannot append to {}; the change stays in memory only", T::FILE
                );
            }
        }
    }

    /// Flushes written records to the disk if any are unsynced (without the write lock).
    pub(crate) fn sync(&self) -> io::Result<()> {
        if self.dirty.swap(false, Ordering::AcqRel) {
            self.syncer.sync_data().inspect_err(|_| {
                self.dirty.store(true, Ordering::Release);
            })?;
        }
        Ok(())
    }
}

/// Every whole record of the file and the byte length they span.
fn read_all<T: Line>(file: &File, path: &Path) -> io::Result<(Vec<T>, u64)> {
    let mut reader = BufReader::new(file.try_clone()?);
    reader.seek(SeekFrom::Start(0))?;
    let (mut records, mut good, mut line) = (Vec::new(), 0u64, Vec::new());
    loop {
        line.clear();
        let read = reader.read_until(b'\n', &mut line)?;
        if read == 0 || line.last() != Some(&b'\n') {
            return Ok((records, good));
        }
        match serde_json::from_slice::<T>(&line) {
            Ok(record) => records.push(record),
            Err(error) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: {} at byte {good}: {error}", path.display(), T::NOUN),
                ));
            }
        }
        good += read as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{DispatchChanged, DispatchState, EventBody};
    use crate::model::Timestamp;
    use uuid::Uuid;

    fn event(seq: u64) -> Recorded {
        let id = Uuid::now_v7();
        Recorded {
            execution_id: id,
            event_seq: seq,
            body: EventBody::DispatchQueued(DispatchChanged::new(
                id,
                id,
                DispatchState::Pending,
                0,
            )),
            occurred_at: Timestamp::now(),
        }
    }

    #[test]
    fn events_come_back_and_a_torn_tail_is_dropped() {
        let dir = std::env::temp_dir().join(format!("rebuno-journal-{}", Uuid::now_v7()));
        let (journal, none) = Journal::<Batch>::open(&dir).unwrap();
        assert!(none.is_empty());
        let (one, two) = (Batch(vec![event(1), event(2)]), Batch(vec![event(3)]));
        journal.append(&one);
        journal.append(&two);
        journal.sync().unwrap();
        drop(journal);
        let mut file = OpenOptions::new()
            .append(true)
            .open(dir.join(Batch::FILE))
            .unwrap();
        file.write_all(br#"[{"execution_id":"#).unwrap();
        drop(file);
        let (journal, back) = Journal::<Batch>::open(&dir).unwrap();
        assert_eq!(back, vec![one.clone(), two.clone()]);
        let three = Batch(vec![event(4)]);
        journal.append(&three);
        drop(journal);
        let (_, back) = Journal::<Batch>::open(&dir).unwrap();
        assert_eq!(back, vec![one, two, three]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_corrupt_event_in_the_middle_is_an_error() {
        let dir = std::env::temp_dir().join(format!("rebuno-journal-{}", Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(Batch::FILE), b"not json\n").unwrap();
        let error = Journal::<Batch>::open(&dir).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
