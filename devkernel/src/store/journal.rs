//! The on-disk event log of `rebuno-dev --data-dir`: every event of every execution, one
//! JSON object per line, private facts included, in the order the kernel recorded them.
//!
//! An event is written to the file (one `write` call) before the operation that recorded it
//! answers, so killing the process loses nothing it acknowledged; the file is `fsync`ed per
//! batch, by [`Journal::sync`] (the kernel calls it every few milliseconds while there are
//! unsynced writes), so a power cut loses at most that batch. On open, a torn last line (a
//! write cut by a kill) is dropped and the file truncated after the last whole event.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::event::{Recorded, private};

/// The name of the event log inside the data directory.
const FILE: &str = "events.jsonl";

/// An append-only event log file.
#[derive(Debug)]
pub(crate) struct Journal {
    path: PathBuf,
    file: Mutex<File>,
    dirty: AtomicBool,
}

impl Journal {
    /// Opens (creating) `dir/events.jsonl` and reads back every whole event in it.
    pub(crate) fn open(dir: &Path) -> io::Result<(Self, Vec<Recorded>)> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(FILE);
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)?;
        let (events, good) = read_all(&file, &path)?;
        if good < file.metadata()?.len() {
            tracing::warn!(path = %path.display(), "dropping a torn last event");
            file.set_len(good)?;
        }
        file.seek(SeekFrom::End(0))?;
        let journal = Self {
            path,
            file: Mutex::new(file),
            dirty: AtomicBool::new(false),
        };
        Ok((journal, events))
    }

    /// Appends one event as a line.
    pub(crate) fn append(&self, entry: &Recorded) {
        let line = private::stored(|| serde_json::to_vec(entry));
        let written = line.map_err(io::Error::other).and_then(|mut line| {
            line.push(b'\n');
            super::lock(&self.file).write_all(&line)
        });
        match written {
            Ok(()) => self.dirty.store(true, Ordering::Release),
            Err(error) => {
                tracing::error!(path = %self.path.display(), %error, "cannot append to the event log");
            }
        }
    }

    /// Flushes written events to the disk if any are unsynced.
    pub(crate) fn sync(&self) -> io::Result<()> {
        if self.dirty.swap(false, Ordering::AcqRel) {
            super::lock(&self.file).sync_data()?;
        }
        Ok(())
    }
}

/// Every whole event of the file and the byte length they span.
fn read_all(file: &File, path: &Path) -> io::Result<(Vec<Recorded>, u64)> {
    let mut reader = BufReader::new(file.try_clone()?);
    reader.seek(SeekFrom::Start(0))?;
    let (mut events, mut good, mut line) = (Vec::new(), 0u64, Vec::new());
    loop {
        line.clear();
        let read = reader.read_until(b'\n', &mut line)?;
        if read == 0 || line.last() != Some(&b'\n') {
            return Ok((events, good));
        }
        match serde_json::from_slice::<Recorded>(&line) {
            Ok(event) => events.push(event),
            Err(error) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: event at byte {good}: {error}", path.display()),
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
        let (journal, none) = Journal::open(&dir).unwrap();
        assert!(none.is_empty());
        let (one, two) = (event(1), event(2));
        journal.append(&one);
        journal.append(&two);
        journal.sync().unwrap();
        drop(journal);
        let mut file = OpenOptions::new()
            .append(true)
            .open(dir.join(FILE))
            .unwrap();
        file.write_all(br#"{"execution_id":"#).unwrap();
        drop(file);
        let (journal, back) = Journal::open(&dir).unwrap();
        assert_eq!(back, vec![one.clone(), two.clone()]);
        let three = event(3);
        journal.append(&three);
        drop(journal);
        let (_, back) = Journal::open(&dir).unwrap();
        assert_eq!(back, vec![one, two, three]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_corrupt_event_in_the_middle_is_an_error() {
        let dir = std::env::temp_dir().join(format!("rebuno-journal-{}", Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(FILE), b"not json\n").unwrap();
        let error = Journal::open(&dir).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
