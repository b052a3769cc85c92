//! Defaults and checks shared by the agent's and the client's builders. Each check records its
//! problem instead of failing, so `build()` can report every bad setting at once.

use std::time::Duration;

use crate::kernel::{BaseUrl, SharedTransport};
use crate::rt::Runtime;

/// The default timeout of a request to the kernel.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(35);

/// A non-empty environment variable.
pub(crate) fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The kernel URL, or a recorded problem.
pub(crate) fn base_url(url: Option<String>, problems: &mut Vec<String>) -> Option<BaseUrl> {
    let Some(url) = url.filter(|u| !u.trim().is_empty()) else {
        problems.push("kernel URL required (set REBUNO_URL or call .base_url())".to_owned());
        return None;
    };
    BaseUrl::parse(&url)
        .map_err(|e| problems.push(e.to_string()))
        .ok()
}

/// The runtime, defaulting to Tokio with feature `rt-tokio`, or a recorded problem.
pub(crate) fn runtime(runtime: Option<Runtime>, problems: &mut Vec<String>) -> Option<Runtime> {
    let runtime = runtime.or_else(default_runtime);
    if runtime.is_none() {
        problems.push("no runtime: enable feature `rt-tokio` or call .runtime()".to_owned());
    }
    runtime
}

/// The transport, defaulting to reqwest with feature `reqwest`, or a recorded problem.
pub(crate) fn transport(
    transport: Option<SharedTransport>,
    problems: &mut Vec<String>,
) -> Option<SharedTransport> {
    match transport.map(Ok).or_else(default_transport) {
        Some(Ok(transport)) => Some(transport),
        Some(Err(error)) => {
            problems.push(error.to_string());
            None
        }
        None => {
            problems.push("no transport: enable feature `reqwest` or call .transport()".to_owned());
            None
        }
    }
}

#[cfg(feature = "rt-tokio")]
fn default_runtime() -> Option<Runtime> {
    Some(Runtime::tokio())
}

#[cfg(not(feature = "rt-tokio"))]
fn default_runtime() -> Option<Runtime> {
    None
}

#[cfg(feature = "reqwest")]
fn default_transport() -> Option<crate::Result<SharedTransport>> {
    use crate::error::{Error, ErrorKind};
    Some(
        crate::kernel::ReqwestTransport::new()
            .map(SharedTransport::new)
            .map_err(|e| {
                Error::new(ErrorKind::Config, "could not create the HTTP client").with_source(e)
            }),
    )
}

#[cfg(not(feature = "reqwest"))]
fn default_transport() -> Option<crate::Result<SharedTransport>> {
    None
}
