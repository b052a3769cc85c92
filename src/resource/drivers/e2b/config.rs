//! [`E2bSandbox`]: the driver's settings, where they come from, and the URLs they make.

use std::fmt;
use std::time::Duration;

use super::api::{Api, SandboxInfo};
use super::envd::Envd;
use super::error::E2bError;
use crate::Secret;
use crate::transport::{Peer, SharedTransport, Transport, TransportError, default_transport};

/// The template a sandbox starts from unless [`E2bSandbox::template`] says otherwise.
const DEFAULT_TEMPLATE: &str = "base";
/// How long a sandbox lives after each create or connect, unless [`E2bSandbox::timeout`] says
/// otherwise.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(600);
/// E2B's domain unless `E2B_DOMAIN` or [`E2bSandbox::domain`] says otherwise.
const DEFAULT_DOMAIN: &str = "e2b.app";
/// How long one API or envd request may take (the official SDKs' default).
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// The port envd listens on inside every sandbox.
pub(super) const ENVD_PORT: u16 = 49983;

/// A [`ResourceDriver`](crate::resource::ResourceDriver) for [E2B](https://e2b.dev) sandboxes:
/// each execution gets its own sandbox, checkpointed by E2B snapshots. Its handle is a
/// [`Sandbox`](super::Sandbox).
///
/// - `create(None)` creates a sandbox from the [template](Self::template) (`POST
///   /sandboxes`); `create(Some(snapshot))` creates one from that snapshot, or fails with
///   [`CheckpointUnavailable`](crate::resource::CheckpointUnavailable) when E2B no longer has
///   it (the API answers 404).
/// - The binding is `{"sandbox_id": ...}`; `open` connects to the sandbox again (`POST
///   /sandboxes/{id}/connect`), which resumes it if it was paused and extends its life.
/// - `checkpoint` takes a snapshot (`POST /sandboxes/{id}/snapshots`) and returns its id.
///   Taking a snapshot drops the sandbox's connections, so the driver then connects again and
///   refreshes the handle in place: every clone of it stays usable.
/// - With [`pause_while_waiting`](Self::pause_while_waiting), a dispatch that ends because the
///   execution waits (an approval, subagents, the host's deadline) pauses the sandbox; the next
///   dispatch's `open` resumes it.
///
/// Every request goes through the SDK's [`Transport`]: the default HTTP client, or the one you
/// pass (the Workers adapter's `FetchTransport` on Cloudflare Workers). `Debug` never shows the
/// API key.
///
/// ```no_run
/// use std::time::Duration;
///
/// use rebuno::resource::drivers::E2bSandbox;
///
/// let driver = E2bSandbox::from_env()? // E2B_API_KEY, and E2B_DOMAIN etc. when set
///     .template("base")
///     .timeout(Duration::from_secs(900));
/// # Ok::<(), rebuno::resource::drivers::E2bError>(())
/// ```
#[derive(Clone)]
pub struct E2bSandbox {
    api_key: Secret,
    template: String,
    lifetime: Duration,
    domain: String,
    api_url: Option<String>,
    sandbox_url: Option<String>,
    transport: Option<SharedTransport>,
    request_timeout: Duration,
    pause_while_waiting: bool,
    kill_when_done: bool,
    coverage_reuse: bool,
}

impl fmt::Debug for E2bSandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("E2bSandbox")
            .field("template", &self.template)
            .field("timeout", &self.lifetime)
            .field("api_url", &self.api_base())
            .field("sandbox_url", &self.sandbox_url)
            .field("domain", &self.domain)
            .field("request_timeout", &self.request_timeout)
            .field("pause_while_waiting", &self.pause_while_waiting)
            .field("kill_when_done", &self.kill_when_done)
            .field("coverage_reuse", &self.coverage_reuse)
            .finish_non_exhaustive()
    }
}

impl E2bSandbox {
    /// A driver using `api_key`, with the defaults: template `"base"`, a 600 s sandbox
    /// lifetime, domain `e2b.app`. Reads no environment variable (see
    /// [`from_env`](Self::from_env) for that).
    ///
    /// ```
    /// let driver = rebuno::resource::drivers::E2bSandbox::new("e2b_example_key");
    /// assert!(!format!("{driver:?}").contains("e2b_example_key"));
    /// ```
    pub fn new(api_key: impl Into<Secret>) -> Self {
        Self {
            api_key: api_key.into(),
            template: DEFAULT_TEMPLATE.to_owned(),
            lifetime: DEFAULT_LIFETIME,
            domain: DEFAULT_DOMAIN.to_owned(),
            api_url: None,
            sandbox_url: None,
            transport: None,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            pause_while_waiting: false,
            kill_when_done: false,
            coverage_reuse: false,
        }
    }

    /// A driver configured from the environment, as E2B's SDKs read it: `E2B_API_KEY`
    /// (required), `E2B_DOMAIN` (default `e2b.app`), `E2B_API_URL` (default
    /// `https://api.<domain>`) and `E2B_SANDBOX_URL` (default: each sandbox's own
    /// `https://49983-<sandbox id>.<domain>`). Empty values count as unset.
    ///
    /// On Cloudflare Workers there is no process environment: use [`new`](Self::new) with the
    /// key from a secret.
    ///
    /// # Errors
    ///
    /// [`E2bErrorKind::Config`](super::E2bErrorKind::Config) when `E2B_API_KEY` is not set,
    /// saying what to set.
    pub fn from_env() -> Result<Self, E2bError> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env) over any source of variables.
    pub(super) fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self, E2bError> {
        let var = |name: &str| var(name).filter(|value| !value.is_empty());
        let mut driver = Self::new(var("E2B_API_KEY").ok_or_else(E2bError::missing_key)?);
        if let Some(domain) = var("E2B_DOMAIN") {
            driver.domain = domain;
        }
        driver.api_url = var("E2B_API_URL");
        driver.sandbox_url = var("E2B_SANDBOX_URL");
        Ok(driver)
    }

    /// The template new sandboxes start from (default `"base"`): a template id or name.
    #[must_use]
    pub fn template(mut self, template: impl Into<String>) -> Self {
        self.template = template.into();
        self
    }

    /// How long a sandbox lives (default 600 s), counted again from every create and every
    /// connect (each dispatch's `open`, and after each checkpoint). Sent in whole seconds,
    /// rounded up. A sandbox that reaches it is killed by E2B (it is not paused).
    #[must_use]
    pub fn timeout(mut self, lifetime: Duration) -> Self {
        self.lifetime = lifetime;
        self
    }

    /// E2B's domain (default `e2b.app`, or `E2B_DOMAIN` with [`from_env`](Self::from_env)):
    /// the API is `https://api.<domain>` and each sandbox's envd
    /// `https://49983-<sandbox id>.<domain>`, unless the create answer names another domain.
    #[must_use]
    pub fn domain(mut self, domain: impl Into<String>) -> Self {
        self.domain = domain.into();
        self
    }

    /// The API's base URL, in place of `https://api.<domain>`: e.g. a local stand-in's
    /// `http://127.0.0.1:PORT`.
    #[must_use]
    pub fn api_url(mut self, url: impl Into<String>) -> Self {
        self.api_url = Some(url.into());
        self
    }

    /// One base URL for every sandbox's envd, in place of
    /// `https://49983-<sandbox id>.<domain>`: e.g. a local stand-in's URL. Requests name their
    /// sandbox with the `E2b-Sandbox-Id` header (sent in every case).
    #[must_use]
    pub fn sandbox_url(mut self, url: impl Into<String>) -> Self {
        self.sandbox_url = Some(url.into());
        self
    }

    /// Sends every request through `transport` (by default the SDK's HTTP client for
    /// providers: hyper on native targets, the JS `fetch` through reqwest on wasm32).
    ///
    /// ```ignore
    /// let driver = E2bSandbox::new(api_key).transport(rebuno_workers::FetchTransport::new());
    /// ```
    #[must_use]
    pub fn transport(mut self, transport: impl Transport + 'static) -> Self {
        self.transport = Some(SharedTransport::new(transport));
        self
    }

    /// Bounds each API and envd request, answer included (default 60 s, at most 24 h).
    /// Commands have their own timeout ([`RunOptions::timeout`](super::RunOptions::timeout)).
    #[must_use]
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout.min(super::commands::MAX_TIMEOUT);
        self
    }

    /// Pause the sandbox when a dispatch ends because the execution waits (blocked on an
    /// approval, on subagents or on a rate limit; not at a host deadline); the next dispatch's `open`
    /// resumes it. A paused sandbox costs nothing but storage, and resuming takes about a
    /// second. Default `false`.
    #[must_use]
    pub fn pause_while_waiting(mut self, pause: bool) -> Self {
        self.pause_while_waiting = pause;
        self
    }

    /// Kill the sandbox once its execution is done (completed, failed or cancelled), rather
    /// than leave it running until its lifetime ends ([`timeout`](Self::timeout)). Forks
    /// start from snapshots, so nothing needs it afterwards. Default `false`, as E2B's SDKs
    /// leave a sandbox be.
    #[must_use]
    pub fn kill_when_done(mut self, kill: bool) -> Self {
        self.kill_when_done = kill;
        self
    }

    /// Keep a checkpoint's coverage until an affecting step starts (see
    /// [`ResourceDriver::coverage_reuse`](crate::resource::ResourceDriver::coverage_reuse)).
    /// Use it only when every change to the sandbox goes through declared tools and steps.
    #[must_use]
    pub fn with_coverage_reuse(mut self, reuse: bool) -> Self {
        self.coverage_reuse = reuse;
        self
    }
}

/// What the driver's trait methods need.
impl E2bSandbox {
    pub(super) fn template_id(&self) -> &str {
        &self.template
    }

    pub(super) fn coverage_reuse_on(&self) -> bool {
        self.coverage_reuse
    }

    pub(super) fn pauses_while_waiting(&self) -> bool {
        self.pause_while_waiting
    }

    pub(super) fn kills_when_done(&self) -> bool {
        self.kill_when_done
    }

    /// The lifetime as the API takes it: whole seconds, rounded up, within `int32`.
    pub(super) fn lifetime_secs(&self) -> u32 {
        let secs = self.lifetime.as_secs() + u64::from(self.lifetime.subsec_nanos() > 0);
        let most = i32::MAX.unsigned_abs();
        u32::try_from(secs).map_or(most, |secs| secs.min(most))
    }

    /// The REST API client, on the configured transport or the SDK's default one.
    pub(super) fn api(&self) -> Result<Api, E2bError> {
        let transport = match &self.transport {
            Some(transport) => transport.clone(),
            None => match shared_default() {
                Some(Ok(transport)) => transport,
                Some(Err(error)) => {
                    return Err(E2bError::config(format!(
                        "could not create the HTTP client: {error}"
                    )));
                }
                None => {
                    return Err(E2bError::config(
                        "no HTTP client is compiled in: pass one with E2bSandbox::transport",
                    ));
                }
            },
        };
        Ok(Api::new(
            self.api_base(),
            self.api_key.clone(),
            transport,
            self.request_timeout,
        ))
    }

    /// The connection to the envd of the sandbox `info` describes.
    pub(super) fn envd(&self, api: &Api, info: SandboxInfo) -> Envd {
        let base = match &self.sandbox_url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => {
                let domain = info.domain.as_deref().unwrap_or(&self.domain);
                format!("https://{ENVD_PORT}-{}.{domain}", info.sandbox_id)
            }
        };
        Envd::new(base, info, api.transport().clone(), self.request_timeout)
    }

    fn api_base(&self) -> String {
        match &self.api_url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => format!("https://api.{}", self.domain),
        }
    }
}

/// The default transport, one per process on native targets (its connection pool shared by
/// every driver and handle: a Lambda dispatch builds its driver anew, and should not set up TLS
/// and connections anew with it), as `llm::fetch` shares its own.
#[cfg(not(target_arch = "wasm32"))]
fn shared_default() -> Option<Result<SharedTransport, TransportError>> {
    static SHARED: std::sync::OnceLock<SharedTransport> = std::sync::OnceLock::new();
    if let Some(transport) = SHARED.get() {
        return Some(Ok(transport.clone()));
    }
    let made = default_transport(Peer::Provider)?;
    Some(made.map(|transport| SHARED.get_or_init(|| transport).clone()))
}

/// On wasm32 the host's `fetch` serves each request: there is no pool to share.
#[cfg(target_arch = "wasm32")]
fn shared_default() -> Option<Result<SharedTransport, TransportError>> {
    default_transport(Peer::Provider)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn the_environment_is_read_as_the_sdks_read_it() {
        let error = E2bSandbox::from_vars(vars(&[("E2B_API_KEY", "")])).unwrap_err();
        assert!(
            error.to_string().contains("E2B_API_KEY is not set"),
            "{error}"
        );
        let driver = E2bSandbox::from_vars(vars(&[
            ("E2B_API_KEY", "e2b_secret_value"),
            ("E2B_DOMAIN", "example.dev"),
        ]))
        .unwrap();
        assert_eq!(driver.api_base(), "https://api.example.dev");
        let driver = E2bSandbox::from_vars(vars(&[
            ("E2B_API_KEY", "e2b_secret_value"),
            ("E2B_API_URL", "http://127.0.0.1:3000/"),
            ("E2B_SANDBOX_URL", "http://127.0.0.1:3000"),
        ]))
        .unwrap();
        assert_eq!(driver.api_base(), "http://127.0.0.1:3000");
        assert_eq!(driver.sandbox_url.as_deref(), Some("http://127.0.0.1:3000"));
        assert!(!format!("{driver:?}").contains("e2b_secret_value"));
    }

    #[test]
    fn the_lifetime_is_whole_seconds_rounded_up() {
        let driver = E2bSandbox::new("k");
        assert_eq!(driver.lifetime_secs(), 600);
        assert_eq!(
            driver
                .clone()
                .timeout(Duration::from_millis(1500))
                .lifetime_secs(),
            2
        );
        assert_eq!(
            driver
                .timeout(Duration::from_secs(u64::MAX))
                .lifetime_secs(),
            i32::MAX.unsigned_abs()
        );
    }
}
