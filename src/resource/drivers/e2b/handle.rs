//! [`Sandbox`]: the handle on one E2B sandbox, shared by every clone.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;

use super::api::Api;
use super::commands::{self, CommandOutput, RunOptions};
use super::envd::Envd;
use super::error::E2bError;
use super::files::{self, Entry};

/// A handle on one E2B sandbox: its files and its commands, through the sandbox's envd.
///
/// Cheap to clone; every clone talks to the same sandbox. When the driver checkpoints the
/// sandbox (which drops its connections) it reconnects and refreshes the connection of every
/// clone in place, so a handle stays usable across checkpoints.
///
/// Relative paths resolve against the user's home, `/home/user`.
///
/// ```no_run
/// # async fn demo(sandbox: rebuno::resource::drivers::Sandbox) -> Result<(), rebuno::resource::drivers::E2bError> {
/// sandbox.write("project/src/main.rs", "fn main() {}\n").await?;
/// let output = sandbox.run("cd project && ls src").await?;
/// assert!(output.success());
/// assert_eq!(output.stdout, "main.rs\n");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

struct Inner {
    id: String,
    api: Api,
    /// Replaced whole when a checkpoint reconnects; never held across an `await`.
    envd: Mutex<Arc<Envd>>,
}

impl fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let envd = self.envd();
        f.debug_struct("Sandbox")
            .field("sandbox_id", &self.inner.id)
            .field("envd_url", &envd.url())
            .finish_non_exhaustive()
    }
}

impl Sandbox {
    pub(super) fn new(api: Api, envd: Envd) -> Self {
        Self {
            inner: Arc::new(Inner {
                id: envd.sandbox_id().to_owned(),
                api,
                envd: Mutex::new(Arc::new(envd)),
            }),
        }
    }

    /// The REST API client the sandbox was created or opened with.
    pub(super) fn api(&self) -> &Api {
        &self.inner.api
    }

    /// Replaces the envd connection of every clone (after a reconnect).
    pub(super) fn refresh(&self, envd: Envd) {
        *self
            .inner
            .envd
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(envd);
    }

    /// The current envd connection.
    fn envd(&self) -> Arc<Envd> {
        Arc::clone(
            &self
                .inner
                .envd
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// The sandbox's id (what the binding records).
    pub fn sandbox_id(&self) -> &str {
        &self.inner.id
    }

    /// The file's contents.
    ///
    /// # Errors
    ///
    /// [`E2bErrorKind::NotFound`](super::E2bErrorKind::NotFound) when there is no such file;
    /// others as [`E2bError`] says.
    pub async fn read(&self, path: &str) -> Result<Bytes, E2bError> {
        files::read(&self.envd(), path).await
    }

    /// The file's contents as text; invalid UTF-8 is replaced with `U+FFFD` (as E2B's SDKs
    /// read text).
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read).
    pub async fn read_to_string(&self, path: &str) -> Result<String, E2bError> {
        let bytes = self.read(path).await?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Writes the file, replacing it if it exists and creating its parent directories.
    ///
    /// # Errors
    ///
    /// As [`E2bError`] says (e.g. the path is a directory).
    pub async fn write(&self, path: &str, contents: impl AsRef<[u8]>) -> Result<(), E2bError> {
        files::write(&self.envd(), path, contents.as_ref()).await
    }

    /// The entries directly in `dir`.
    ///
    /// # Errors
    ///
    /// [`E2bErrorKind::NotFound`](super::E2bErrorKind::NotFound) when there is no such
    /// directory; others as [`E2bError`] says.
    pub async fn list(&self, dir: &str) -> Result<Vec<Entry>, E2bError> {
        files::list(&self.envd(), dir).await
    }

    /// Removes a file, or a directory and everything in it. Nothing at `path` is not an
    /// error (envd removes as `rm -rf` does).
    ///
    /// # Errors
    ///
    /// As [`E2bError`] says (e.g. permission denied).
    pub async fn remove(&self, path: &str) -> Result<(), E2bError> {
        files::remove(&self.envd(), path).await
    }

    /// Whether a file or directory exists at `path`.
    ///
    /// # Errors
    ///
    /// As [`E2bError`] says (never for a missing path: that is `false`).
    pub async fn exists(&self, path: &str) -> Result<bool, E2bError> {
        files::exists(&self.envd(), path).await
    }

    /// Creates the directory and its parents; `false` when it existed already.
    ///
    /// # Errors
    ///
    /// As [`E2bError`] says.
    pub async fn make_dir(&self, path: &str) -> Result<bool, E2bError> {
        files::make_dir(&self.envd(), path).await
    }

    /// Runs `cmd` with `/bin/bash -l -c` in the user's home and waits for it, with the
    /// default [`RunOptions`] (60 s timeout, 1 MiB of each output kept).
    ///
    /// A non-zero exit code is an [`CommandOutput`], not an error (E2B's SDKs raise
    /// instead): check [`CommandOutput::success`].
    ///
    /// # Errors
    ///
    /// [`E2bErrorKind::Timeout`](super::E2bErrorKind::Timeout) when the command runs past
    /// its timeout: the process is killed (`SIGKILL`) first. Others as [`E2bError`] says.
    pub async fn run(&self, cmd: &str) -> Result<CommandOutput, E2bError> {
        self.run_with(cmd, RunOptions::new()).await
    }

    /// Runs `cmd` as [`run`](Self::run) does, with `options`.
    ///
    /// ```no_run
    /// # async fn demo(sandbox: rebuno::resource::drivers::Sandbox) -> Result<(), rebuno::resource::drivers::E2bError> {
    /// use std::time::Duration;
    /// use rebuno::resource::drivers::RunOptions;
    ///
    /// let options = RunOptions::new().cwd("project").timeout(Duration::from_secs(600));
    /// let tests = sandbox.run_with("cargo test", options).await?;
    /// println!("exit {}: {}", tests.exit_code, tests.stdout);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run).
    pub async fn run_with(
        &self,
        cmd: &str,
        options: RunOptions,
    ) -> Result<CommandOutput, E2bError> {
        commands::run(&self.envd(), cmd, &options).await
    }

    /// Kills the sandbox (`DELETE /sandboxes/{id}`), for cleanup when the execution is done
    /// with it. A sandbox already gone is not an error. The handle is unusable afterwards, and
    /// a later dispatch's `open` fails.
    ///
    /// # Errors
    ///
    /// As [`E2bError`] says.
    pub async fn kill(&self) -> Result<(), E2bError> {
        self.inner.api.kill(&self.inner.id).await.map(|_| ())
    }
}
