//! The Python venv the interop and telemetry suites of every crate run from (the official SDK,
//! uvicorn, and the OTLP receiver), made by `scripts/interop-venv.sh` on first use. Included
//! with `#[path]`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The repository's root: the nearest ancestor of the including crate with
/// `scripts/interop-venv.sh`.
pub fn repo() -> PathBuf {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    crate_dir
        .ancestors()
        .find(|dir| dir.join("scripts/interop-venv.sh").is_file())
        .map_or(crate_dir.clone(), PathBuf::from)
}

/// The venv's python, creating the venv with `scripts/interop-venv.sh` on first use. The
/// script serializes concurrent runs on a lock file; this `OnceLock` serializes the tests of
/// this binary.
pub fn python() -> PathBuf {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match PYTHON.get_or_init(prepare_venv) {
        Ok(path) => path.clone(),
        Err(message) => panic!("{message}"),
    }
}

fn prepare_venv() -> Result<PathBuf, String> {
    let script = repo().join("scripts/interop-venv.sh");
    let mut command = Command::new("bash");
    command.arg(&script).stdin(Stdio::null());
    if let Some(dir) = std::env::var_os("REBUNO_INTEROP_VENV") {
        command.arg(dir);
    }
    let out = command
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "the interop suite needs a venv with the official Python SDK, and {} failed ({}):\n\
             {stderr}\nInstall Python 3.11+ with venv (or set PYTHON=/path/to/python3.11) and \
             make PyPI reachable, then rerun.",
            script.display(),
            out.status
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = stdout.lines().last().map(str::trim).unwrap_or_default();
    let path = PathBuf::from(path);
    if !path.is_file() {
        return Err(format!(
            "{} printed {stdout:?}, not a python path; stderr:\n{stderr}",
            script.display()
        ));
    }
    Ok(path)
}
