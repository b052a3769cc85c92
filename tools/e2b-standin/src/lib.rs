//! A local stand-in for [E2B](https://e2b.dev): the sandbox REST API (`api.e2b.app`) and each
//! sandbox's envd (files, filesystem and process Connect services) on one listener, backed by
//! real directories and real processes. Test support for the E2B resource driver, not published.
//!
//! Each sandbox is a directory `<root>/sandboxes/<id>/fs` (sandbox path `/x` is `<fs>/x`, relative
//! paths resolve against `/home/user`); commands run as `/bin/bash -l -c <cmd>` with their working
//! directory and `HOME` mapped into it; pausing stops the sandbox's processes (`SIGSTOP`) and
//! snapshots are copies under `<root>/snapshots/`. Its fidelity is checked by E2B's own Python
//! SDK (`tests/official_sdk.rs`); what it does not do faithfully is listed in its README.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use rebuno_e2b_standin::{E2bStandin, StandinConfig};
//!
//! let standin = E2bStandin::start(StandinConfig::new("/tmp/e2b-root", "e2b_test_key"))?;
//! // Point an E2B client at it: E2B_API_URL and E2B_SANDBOX_URL = standin.url().
//! println!("{}", standin.url());
//! standin.shutdown().await;
//! # Ok(())
//! # }
//! ```

mod api;
mod body;
mod capture;
mod config;
mod connect;
mod envd;
mod ids;
mod paths;
mod server;
mod state;
mod time;

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use config::StandinConfig;

/// A running stand-in: the REST API and every sandbox's envd on one local listener.
///
/// Dropping it stops the listener and kills every sandbox process; [`E2bStandin::shutdown`]
/// does the same and waits for the listener to close.
pub struct E2bStandin {
    shared: Arc<state::Shared>,
    addr: SocketAddr,
    url: String,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl E2bStandin {
    /// Binds the listener and starts serving. Must be called from within a Tokio runtime
    /// (the listener and every sandbox task run on it).
    ///
    /// # Errors
    ///
    /// When called outside a Tokio runtime, or when the root directory cannot be created, the
    /// address cannot be bound or the capture file cannot be opened.
    pub fn start(config: StandinConfig) -> io::Result<Self> {
        let handle = tokio::runtime::Handle::try_current().map_err(|e| {
            io::Error::other(format!("E2bStandin::start needs a Tokio runtime: {e}"))
        })?;
        let listener = std::net::TcpListener::bind(config.listen_addr())?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let url = format!("http://{addr}");
        let shared = Arc::new(state::Shared::new(&config)?);
        let listener = {
            let _guard = handle.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let (stop, stopped) = oneshot::channel();
        let task = handle.spawn(server::serve(listener, Arc::clone(&shared), stopped));
        handle.spawn(state::reap_expired(Arc::downgrade(&shared)));
        Ok(Self {
            shared,
            addr,
            url,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The base URL of the REST API and of every sandbox's envd (`http://127.0.0.1:<port>`):
    /// the value for `E2B_API_URL` and `E2B_SANDBOX_URL`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The API key the REST API accepts (`X-API-Key`).
    pub fn api_key(&self) -> &str {
        self.shared.api_key()
    }

    /// The root directory: `sandboxes/<id>/fs` and `snapshots/<id>` live under it.
    pub fn root(&self) -> &Path {
        self.shared.root()
    }

    /// The host directory holding a sandbox's filesystem (`<root>/sandboxes/<id>/fs`), whether
    /// or not the sandbox exists.
    pub fn sandbox_fs(&self, sandbox_id: &str) -> PathBuf {
        self.shared.sandbox_fs(sandbox_id)
    }

    /// Every request served so far, oldest first, in the capture file's JSON shape (one object
    /// per request: method, path, query, content type, the headers that matter with secrets
    /// redacted, the body, the response status).
    pub fn captured(&self) -> Vec<serde_json::Value> {
        self.shared.capture().requests()
    }

    /// Stops the listener, kills every sandbox process and waits for the listener task to end.
    pub async fn shutdown(mut self) {
        self.stop_now();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    fn stop_now(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.shared.kill_all();
    }
}

impl Drop for E2bStandin {
    fn drop(&mut self) {
        self.stop_now();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl fmt::Debug for E2bStandin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("E2bStandin")
            .field("url", &self.url)
            .field("root", &self.shared.root())
            .field("api_key", &"** redacted **")
            .finish_non_exhaustive()
    }
}
