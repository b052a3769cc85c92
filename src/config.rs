//! Defaults and checks shared by the agent's and the client's builders. Each check records its
//! problem instead of failing, so `build()` can report every bad setting at once.

use std::time::Duration;

use crate::kernel::BaseUrl;
use crate::rt::Runtime;
use crate::transport::SharedTransport;

/// The default timeout of a request to the kernel.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(35);

/// What a kernel URL looks like, for the errors about one.
const URL_FORM: &str = "set REBUNO_URL (or .base_url()) to http://host:port or https://host:port, \
     with an optional path prefix and no query, e.g. http://127.0.0.1:8080";

/// A non-empty environment variable.
pub(crate) fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The kernel URL, or a recorded problem.
pub(crate) fn base_url(url: Option<String>, problems: &mut Vec<String>) -> Option<BaseUrl> {
    let Some(url) = url.filter(|u| !u.trim().is_empty()) else {
        problems.push(
            "kernel URL required: set REBUNO_URL (or call .base_url()) to the kernel's URL, \
             e.g. http://127.0.0.1:8080"
                .to_owned(),
        );
        return None;
    };
    BaseUrl::parse(&url)
        .map_err(|e| problems.push(format!("{e}: {URL_FORM}")))
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
///
/// The default transport cannot speak TLS on native targets without feature `rustls`, so an
/// `https://` kernel URL is refused here rather than failing every request at run time.
pub(crate) fn transport(
    transport: Option<SharedTransport>,
    base: Option<&BaseUrl>,
    problems: &mut Vec<String>,
) -> Option<SharedTransport> {
    let unreachable = base.and_then(|base| tls_problem(base, DEFAULT_TRANSPORT_HAS_TLS));
    if let (None, Some(problem)) = (&transport, unreachable) {
        problems.push(problem);
        return None;
    }
    match transport.map(Ok).or_else(default_transport) {
        Some(Ok(transport)) => Some(transport),
        Some(Err(error)) => {
            problems.push(error.to_string());
            None
        }
        None => {
            problems.push(
                "no transport: enable feature `rt-tokio` or `reqwest`, or call .transport()"
                    .to_owned(),
            );
            None
        }
    }
}

#[cfg(all(feature = "rt-tokio", not(target_arch = "wasm32")))]
fn default_runtime() -> Option<Runtime> {
    Some(Runtime::tokio())
}

#[cfg(not(all(feature = "rt-tokio", not(target_arch = "wasm32"))))]
fn default_runtime() -> Option<Runtime> {
    None
}

/// Why the default transport cannot reach `base`, if it cannot: an `https://` kernel without TLS.
fn tls_problem(base: &BaseUrl, has_tls: bool) -> Option<String> {
    (base.is_https() && !has_tls).then(|| {
        "kernel URL is https:// but feature `rustls` is off: enable it \
         (rebuno = { features = [\"rustls\"] }) or pass your own .transport()"
            .to_owned()
    })
}

/// Whether the default transport can reach an `https://` kernel: with rustls on native, and
/// always on wasm32, where the JS fetch does TLS.
const DEFAULT_TRANSPORT_HAS_TLS: bool = cfg!(any(feature = "rustls", target_arch = "wasm32"));

fn default_transport() -> Option<crate::Result<SharedTransport>> {
    use crate::error::{Error, ErrorKind};
    crate::transport::default_transport(crate::transport::Peer::Kernel).map(|made| {
        made.map_err(|e| {
            Error::new(ErrorKind::Config, "could not create the HTTP client").with_source(e)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_or_missing_kernel_url_says_what_to_set() {
        let mut problems = Vec::new();
        assert!(base_url(None, &mut problems).is_none());
        assert!(base_url(Some("127.0.0.1:8080".to_owned()), &mut problems).is_none());
        assert_eq!(problems.len(), 2);
        for problem in &problems {
            assert!(problem.contains("set REBUNO_URL"), "{problem}");
            assert!(problem.contains("http://127.0.0.1:8080"), "{problem}");
        }
    }

    #[test]
    fn an_https_kernel_without_tls_names_the_feature() {
        let https = BaseUrl::parse("https://kernel.example.com").unwrap_or_else(|e| panic!("{e}"));
        let http = BaseUrl::parse("http://127.0.0.1:8080").unwrap_or_else(|e| panic!("{e}"));
        let problem = tls_problem(&https, false).unwrap_or_default();
        assert!(problem.contains("`rustls`"), "{problem}");
        assert!(problem.contains(".transport()"), "{problem}");
        assert_eq!(tls_problem(&https, true), None);
        assert_eq!(tls_problem(&http, false), None);
    }
}
