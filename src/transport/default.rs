//! Which [`Transport`](super::Transport) the SDK uses when the builder is given none.

use super::{SharedTransport, TransportError};

/// Proxy variables reqwest honours (and [`HyperTransport`](super::HyperTransport) does not).
#[cfg(all(feature = "rt-tokio", feature = "reqwest", not(target_arch = "wasm32")))]
const PROXY_VARIABLES: [&str; 6] = [
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// Who the default transport talks to.
// Without any client compiled in, nothing asks for a provider transport.
#[cfg_attr(not(any(feature = "reqwest", feature = "rt-tokio")), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peer {
    /// The kernel: short requests, as many as the steps in flight.
    Kernel,
    /// LLM providers: calls that may take minutes each, never queued behind one another.
    Provider,
}

/// Native with Tokio: hyper's client, or reqwest when a proxy is configured in the environment.
#[cfg(all(feature = "rt-tokio", not(target_arch = "wasm32")))]
pub(crate) fn default_transport(peer: Peer) -> Option<Result<SharedTransport, TransportError>> {
    #[cfg(feature = "reqwest")]
    if proxy_configured(|name| std::env::var_os(name)) {
        return Some(super::ReqwestTransport::new().map(SharedTransport::new));
    }
    let made = match peer {
        Peer::Kernel => super::HyperTransport::with_max_in_flight(MAX_KERNEL_REQUESTS),
        Peer::Provider => super::HyperTransport::new(),
    };
    Some(made.map(SharedTransport::new))
}

/// Requests one agent process keeps in flight toward the kernel (and connections it keeps
/// pooled): past it, a burst of concurrent steps queues for a pooled connection rather than
/// opening one per request (measured: 100 concurrent tool calls in each of 4 executions opened
/// 0.65 connections per request with a pool of 32 and no limit).
#[cfg(all(feature = "rt-tokio", not(target_arch = "wasm32")))]
const MAX_KERNEL_REQUESTS: usize = 64;

/// wasm32 (the host's `fetch`), or native without Tokio: reqwest.
#[cfg(all(
    feature = "reqwest",
    not(all(feature = "rt-tokio", not(target_arch = "wasm32")))
))]
pub(crate) fn default_transport(_: Peer) -> Option<Result<SharedTransport, TransportError>> {
    Some(super::ReqwestTransport::new().map(SharedTransport::new))
}

/// No client compiled in: the builder must be given a transport.
#[cfg(not(any(
    feature = "reqwest",
    all(feature = "rt-tokio", not(target_arch = "wasm32"))
)))]
pub(crate) fn default_transport(_: Peer) -> Option<Result<SharedTransport, TransportError>> {
    None
}

/// Whether any proxy variable is set to something.
#[cfg(all(feature = "rt-tokio", feature = "reqwest", not(target_arch = "wasm32")))]
fn proxy_configured(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> bool {
    PROXY_VARIABLES
        .iter()
        .any(|name| var(name).is_some_and(|value| !value.is_empty()))
}

#[cfg(all(
    test,
    feature = "rt-tokio",
    feature = "reqwest",
    not(target_arch = "wasm32")
))]
mod tests {
    use super::*;

    #[test]
    fn a_set_proxy_variable_selects_reqwest() {
        assert!(!proxy_configured(|_| None));
        assert!(!proxy_configured(|_| Some("".into())));
        assert!(proxy_configured(|name| {
            (name == "https_proxy").then(|| "http://proxy:3128".into())
        }));
    }
}
