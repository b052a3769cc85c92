//! Counting step bodies across processes: the function process appends a line to a file named
//! after the step each time a body runs, and the test reads the counts. (The function is another
//! process, and a frozen one at that, so counters in memory would not do.)

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::MARKERS_ENV;

/// A fresh marker directory for one test, removed when dropped.
#[derive(Debug)]
pub struct Markers {
    dir: PathBuf,
}

impl Markers {
    /// Creates `<temp>/rebuno-lambda-<test>-<pid>-<nanos>`.
    pub fn new(test: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos());
        let dir = std::env::temp_dir().join(format!(
            "rebuno-lambda-{test}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("marker directory");
        Self { dir }
    }

    /// The directory, for the function process's environment.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How many times the body of `step` has run.
    pub fn count(&self, step: &str) -> usize {
        std::fs::read_to_string(self.dir.join(step)).map_or(0, |marks| marks.lines().count())
    }
}

impl Drop for Markers {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// In the function process: records that the body of `step` ran once more. A no-op when the
/// test gave no marker directory.
pub fn mark(step: &str) {
    let Some(dir) = std::env::var_os(MARKERS_ENV) else {
        return;
    };
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(Path::new(&dir).join(step))
        .expect("marker file");
    writeln!(file, "{}", std::process::id()).expect("marker written");
    file.sync_all().expect("marker synced");
}
