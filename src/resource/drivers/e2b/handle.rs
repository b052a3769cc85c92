//! [`Sandbox`]: the handle on one E2B sandbox, shared by every clone.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;

use super::E2bSandbox;
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
    /// The driver that opened it: how to connect again.
    driver: E2bSandbox,
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
    pub(super) fn new(driver: &E2bSandbox, api: Api, envd: Envd) -> Self {
        Self {
            inner: Arc::new(Inner {
                id: envd.sandbox_id().to_owned(),
                api,
                driver: driver.clone(),
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

    /// Runs `call` on the current envd connection; when the sandbox's proxy says it is not
    /// running (paused by a dispatch that suspended, while this one had already opened it),
    /// connects again, which resumes a paused sandbox, and runs `call` once more. Safe: a
    /// refused call did nothing.
    async fn on_envd<T, F, Fut>(&self, call: F) -> Result<T, E2bError>
    where
        F: Fn(Arc<Envd>) -> Fut,
        Fut: Future<Output = Result<T, E2bError>>,
    {
        match call(self.envd()).await {
            Err(error) if error.not_running() => {
                let driver = &self.inner.driver;
                let lifetime = driver.lifetime_secs();
                let info = self.inner.api.connect(&self.inner.id, lifetime).await?;
                self.refresh(driver.envd(&self.inner.api, info));
                tracing::debug!(sandbox = %self.inner.id, "E2B sandbox was not running: reconnected");
                call(self.envd()).await
            }
            outcome => outcome,
        }
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
        self.on_envd(|envd| async move { files::read(&envd, path).await })
            .await
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
        let contents = contents.as_ref();
        self.on_envd(|envd| async move { files::write(&envd, path, contents).await })
            .await
    }

    /// The entries directly in `dir`.
    ///
    /// # Errors
    ///
    /// [`E2bErrorKind::NotFound`](super::E2bErrorKind::NotFound) when there is no such
    /// directory; others as [`E2bError`] says.
    pub async fn list(&self, dir: &str) -> Result<Vec<Entry>, E2bError> {
        self.on_envd(|envd| async move { files::list(&envd, dir).await })
            .await
    }

    /// Removes a file, or a directory and everything in it. Nothing at `path` is not an
    /// error (envd removes as `rm -rf` does).
    ///
    /// # Errors
    ///
    /// As [`E2bError`] says (e.g. permission denied).
    pub async fn remove(&self, path: &str) -> Result<(), E2bError> {
        self.on_envd(|envd| async move { files::remove(&envd, path).await })
            .await
    }

    /// Whether a file or directory exists at `path`.
    ///
    /// # Errors
    ///
    /// As [`E2bError`] says (never for a missing path: that is `false`).
    pub async fn exists(&self, path: &str) -> Result<bool, E2bError> {
        self.on_envd(|envd| async move { files::exists(&envd, path).await })
            .await
    }

    /// Creates the directory and its parents; `false` when it existed already.
    ///
    /// # Errors
    ///
    /// As [`E2bError`] says.
    pub async fn make_dir(&self, path: &str) -> Result<bool, E2bError> {
        self.on_envd(|envd| async move { files::make_dir(&envd, path).await })
            .await
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
        let options = &options;
        self.on_envd(|envd| async move { commands::run(&envd, cmd, options).await })
            .await
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
