//! The Rust twins' test plumbing, the same conventions as `py/diffkit.py`: marker files
//! (`<label> <text>` lines under the side's scratch directory) and release files the test
//! writes when a waiting body may go on.

use std::fs;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

/// What a Rust twin's bodies can see of their test: where to mark, and who they are.
#[derive(Debug, Clone)]
pub struct Kit {
    /// The side's scratch directory (`DIFF_DIR` for the Python agents).
    pub dir: PathBuf,
    /// This agent process's label (`DIFF_LABEL`).
    pub label: String,
    /// The side's LLM stub (`DIFF_LLM_URL`).
    pub llm_url: String,
}

impl Kit {
    /// Appends `<label> <text>` to the marker file `name`.
    pub fn mark(&self, name: &str, text: &str) {
        let mut file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(name))
            .expect("marker file");
        writeln!(file, "{} {text}", self.label).expect("mark");
    }

    /// Waits until the test writes `release.<name>`.
    pub async fn released(&self, name: &str) {
        let path = self.dir.join(format!("release.{name}"));
        while !path.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
