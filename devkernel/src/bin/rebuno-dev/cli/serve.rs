//! `rebuno-dev [--config FILE] [--addr HOST:PORT] [--data-dir DIR] [--dispatch-... VALUE]`:
//! the serve command's arguments.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::CliError;
use super::args::Scanned;
use rebuno_devkernel::DispatchRetry;

/// Arguments of the default command, serving the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServeArgs {
    /// Provisioning manifest.
    pub config: Option<PathBuf>,
    /// Listen address (default `127.0.0.1:8080`).
    pub addr: SocketAddr,
    /// Where the event log and the agent and API key registry persist; `None` (the
    /// default) keeps them in memory.
    pub data_dir: Option<PathBuf>,
    /// Delivery retries from `--dispatch-max-attempts`, `--dispatch-base-delay` and
    /// `--dispatch-max-delay`, else from `REBUNO_DISPATCH_MAX_ATTEMPTS`,
    /// `REBUNO_DISPATCH_BASE_DELAY` and `REBUNO_DISPATCH_MAX_DELAY`; what neither gives comes
    /// from the manifest, then the defaults (5, 1 s, 30 s).
    pub dispatch: DispatchRetry,
}

/// The serving options, each taking a value; the top-level parser skips their values when it
/// looks for the command group, so every one of them works with or without `serve`.
pub(crate) const FLAGS: &[&str] = &[
    "--config",
    "-c",
    "--addr",
    "-a",
    "--data-dir",
    "-d",
    "--dispatch-max-attempts",
    "--dispatch-base-delay",
    "--dispatch-max-delay",
];

/// Parses the serve flags; `env` reads the environment.
pub(crate) fn parse(
    args: &[String],
    env: &impl Fn(&str) -> Option<String>,
) -> Result<ServeArgs, CliError> {
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
        dispatch: dispatch_retry(&scanned, env)?,
    })
}

/// The retry flags, over the environment's settings; a bad value is a usage error.
fn dispatch_retry(
    scanned: &Scanned,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<DispatchRetry, CliError> {
    DispatchRetry::from_flags_and_env(|name| scanned.value(&[name]), env)
        .map_err(|error| CliError::Usage(error.to_string()))
}
