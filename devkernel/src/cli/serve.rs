//! `rebuno-dev [--config FILE] [--addr HOST:PORT] [--data-dir DIR]`: the serve command's
//! arguments.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::CliError;
use super::args::Scanned;

/// Arguments of the default command, serving the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeArgs {
    /// Provisioning manifest.
    pub config: Option<PathBuf>,
    /// Listen address (default `127.0.0.1:8080`).
    pub addr: SocketAddr,
    /// Where the event log and the agent and API key registry persist; `None` (the
    /// default) keeps them in memory.
    pub data_dir: Option<PathBuf>,
}

/// The serving options, each taking a value; the top-level parser skips their values when it
/// looks for the command group, so every one of them works with or without `serve`.
pub(crate) const FLAGS: &[&str] = &["--config", "-c", "--addr", "-a", "--data-dir", "-d"];

/// Parses the serve flags.
pub(crate) fn parse(args: &[String]) -> Result<ServeArgs, CliError> {
    let scanned = Scanned::scan(args, FLAGS, &[])?;
    if let Some(extra) = scanned.positional.first() {
        return Err(CliError::Usage(format!("unknown argument {extra:?}")));
    }
    let addr = match scanned.value(&["--addr", "-a"]) {
        Some(text) => text
            .parse()
            .map_err(|e| CliError::Usage(format!("bad --addr {text:?}: {e}")))?,
        None => SocketAddr::from(([127, 0, 0, 1], 8080)),
    };
    Ok(ServeArgs {
        config: scanned.value(&["--config", "-c"]).map(PathBuf::from),
        addr,
        data_dir: scanned.value(&["--data-dir", "-d"]).map(PathBuf::from),
    })
}
