//! The append-only files of `rebuno-dev --data-dir`: one JSON object per line, in the order
//! the kernel wrote them. [`Journal<Recorded>`] is the event log (`events.jsonl`): every event
//! of every execution, private facts included; the agent and API key registry
//! (`registry.jsonl`, [`super::registry`]) is a `Journal` of its own records.
//!
//! A record is written to the file (one `write` call) before the operation that made it
//! answers, so killing the process loses nothing it acknowledged; the file is `fsync`ed per
//! batch, by [`Journal::sync`] (the kernel calls it every few milliseconds while there are
//! unsynced writes), so a power cut loses at most that batch. On open, a torn last line (a
//! write cut by a kill) is dropped and the file truncated after the last whole record; a line
//! that does not parse before it is an error.

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

/// An event of the event log: written with its private facts.
impl Line for Recorded {
    const FILE: &'static str = "events.jsonl";
    const NOUN: &'static str = "event";
    const PRIVATE: bool = false;

    fn encode(&self) -> serde_json::Result<Vec<u8>> {
        private::stored(|| serde_json::to_vec(self))
    }
}

/// An append-only file of `T` records.
#[derive(Debug)]
pub(crate) struct Journal<T> {
    path: PathBuf,
    file: Mutex<File>,
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
        let journal = Self {
            path,
            file: Mutex::new(file),
            dirty: AtomicBool::new(false),
            records: PhantomData,
        };
        Ok((journal, records))
    }

    /// Appends one record as a line (a failure is logged).
    pub(crate) fn append(&self, record: &T) {
        let written = record
            .encode()
            .map_err(io::Error::other)
            .and_then(|mut line| {
                line.push(b'\n');
                super::lock(&self.file).write_all(&line)
            });
        match written {
            Ok(()) => self.dirty.store(true, Ordering::Release),
            Err(error) => {
                tracing::error!(path = %self.path.display(), %error, "cannot append to {}", T::FILE);
            }
        }
    }

    /// Flushes written records to the disk if any are unsynced.
    pub(crate) fn sync(&self) -> io::Result<()> {
        if self.dirty.swap(false, Ordering::AcqRel) {
            super::lock(&self.file).sync_data()?;
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
        let (journal, none) = Journal::<Recorded>::open(&dir).unwrap();
        assert!(none.is_empty());
        let (one, two) = (event(1), event(2));
        journal.append(&one);
        journal.append(&two);
        journal.sync().unwrap();
        drop(journal);
        let mut file = OpenOptions::new()
            .append(true)
            .open(dir.join(Recorded::FILE))
            .unwrap();
        file.write_all(br#"{"execution_id":"#).unwrap();
        drop(file);
        let (journal, back) = Journal::<Recorded>::open(&dir).unwrap();
        assert_eq!(back, vec![one.clone(), two.clone()]);
        let three = event(3);
        journal.append(&three);
        drop(journal);
        let (_, back) = Journal::<Recorded>::open(&dir).unwrap();
        assert_eq!(back, vec![one, two, three]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_corrupt_event_in_the_middle_is_an_error() {
        let dir = std::env::temp_dir().join(format!("rebuno-journal-{}", Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(Recorded::FILE), b"not json\n").unwrap();
        let error = Journal::<Recorded>::open(&dir).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
