//! The stand-in's settings.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

/// How to start an [`E2bStandin`](crate::E2bStandin): where its state lives, the API key it
/// accepts, the address to listen on and an optional capture file.
#[derive(Clone)]
#[must_use]
pub struct StandinConfig {
    root: PathBuf,
    api_key: String,
    listen: SocketAddr,
    capture: Option<PathBuf>,
    team_slug: String,
}

impl StandinConfig {
    /// A configuration serving on `127.0.0.1:0` (an ephemeral port) with its sandboxes and
    /// snapshots under `root`, accepting `api_key` in `X-API-Key`.
    pub fn new(root: impl Into<PathBuf>, api_key: impl Into<String>) -> Self {
        Self {
            root: root.into(),
            api_key: api_key.into(),
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            capture: None,
            team_slug: "local".to_owned(),
        }
    }

    /// The address to listen on (default `127.0.0.1:0`).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Appends every request to `path` as one JSON line (the spec check reads it).
    pub fn capture(mut self, path: impl Into<PathBuf>) -> Self {
        self.capture = Some(path.into());
        self
    }

    /// The team's namespace for named snapshots (`<slug>/<name>:<tag>`, default `local`).
    pub fn team_slug(mut self, slug: impl Into<String>) -> Self {
        self.team_slug = slug.into();
        self
    }

    pub(crate) fn listen_addr(&self) -> SocketAddr {
        self.listen
    }

    pub(crate) fn root_dir(&self) -> &Path {
        &self.root
    }

    pub(crate) fn key(&self) -> &str {
        &self.api_key
    }

    pub(crate) fn capture_path(&self) -> Option<&Path> {
        self.capture.as_deref()
    }

    pub(crate) fn slug(&self) -> &str {
        &self.team_slug
    }
}

impl fmt::Debug for StandinConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StandinConfig")
            .field("root", &self.root)
            .field("api_key", &"** redacted **")
            .field("listen", &self.listen)
            .field("capture", &self.capture)
            .field("team_slug", &self.team_slug)
            .finish()
    }
}
