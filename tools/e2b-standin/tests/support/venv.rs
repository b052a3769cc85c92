//! The Python venv of the official E2B SDK and the spec check (`tools/e2b-standin/requirements.txt`),
//! made by `scripts/interop-venv.sh` on first use, as the interop suite makes its own
//! (`tests/integration/support/otlp/venv.rs`). `REBUNO_E2B_VENV` overrides its directory
//! (default `target/e2b-venv`).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The repository's root (from this crate's tests, or from the root crate's, which include
/// this file by path).
pub(crate) fn repo() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|dir| dir.join("scripts/interop-venv.sh").is_file())
        .map_or(manifest.clone(), PathBuf::from)
}

/// The stand-in crate's directory (its requirements, `validate.py` and the SDK script).
pub(crate) fn crate_dir() -> PathBuf {
    repo().join("tools/e2b-standin")
}

/// The venv's python, creating the venv on first use; panics with the command to run when it
/// cannot be made.
pub(crate) fn python() -> PathBuf {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match PYTHON.get_or_init(prepare) {
        Ok(path) => path.clone(),
        Err(message) => panic!("{message}"),
    }
}

fn prepare() -> Result<PathBuf, String> {
    let repo = repo();
    let dir = std::env::var_os("REBUNO_E2B_VENV")
        .map_or_else(|| repo.join("target/e2b-venv"), PathBuf::from);
    let requirements = crate_dir().join("requirements.txt");
    let script = repo.join("scripts/interop-venv.sh");
    let command = format!(
        "bash {} {} {}",
        script.display(),
        dir.display(),
        requirements.display()
    );
    let out = Command::new("bash")
        .arg(&script)
        .arg(&dir)
        .arg(&requirements)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `{command}`: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "the E2B SDK test needs the venv with e2b==2.63.0 and openapi-core, and making it failed \
             ({}):\n{stderr}\nInstall Python 3.11+ with venv (or set PYTHON=/path/to/python3.11), make \
             PyPI reachable, and run:\n\n    {command}\n",
            out.status
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = PathBuf::from(stdout.lines().last().map(str::trim).unwrap_or_default());
    if !path.is_file() {
        return Err(format!(
            "`{command}` printed {stdout:?}, not a python path; stderr:\n{stderr}"
        ));
    }
    Ok(path)
}
