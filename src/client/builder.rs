//! Configuring a [`Client`].

use std::time::Duration;

use super::Client;
use super::unauthorized;
use crate::Secret;
use crate::error::{Error, ErrorKind, Result};
use crate::kernel::Exchange;
use crate::rt::Runtime;
use crate::transport::{SharedTransport, Transport};

/// Builds a [`Client`]. [`build`](Self::build) reports every problem at once.
#[derive(Debug, Default)]
#[must_use = "call `build()` to get a Client"]
pub struct ClientBuilder {
    base_url: Option<String>,
    api_key: Option<Secret>,
    timeout: Option<Duration>,
    max_attempts: Option<u32>,
    runtime: Option<Runtime>,
    transport: Option<SharedTransport>,
}

impl ClientBuilder {
    /// The kernel's URL. Defaults to `REBUNO_URL`.
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = Some(url.into());
        self
    }

    /// The bearer token (an API key). Defaults to `REBUNO_API_KEY`; none for a dev kernel.
    /// A key the kernel refuses fails each request with [`ErrorKind::Unauthorized`], whose
    /// message says which key to check (never the key itself).
    pub fn api_key(mut self, key: impl Into<Secret>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Timeout of each request. Defaults to 35 s.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// How many times a request is tried in all while the kernel cannot be reached or answers
    /// `502`, `503` or `504`. Defaults to 6, backing off from 250 ms to 8 s between tries;
    /// `1` (or `0`) tries once, for callers that report failures at once, such as a terminal
    /// command.
    ///
    /// ```no_run
    /// # fn demo() -> rebuno::Result<()> {
    /// let client = rebuno::client::Client::builder()
    ///     .base_url("http://127.0.0.1:8080")
    ///     .max_attempts(1)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }

    /// Sleeper and clock for retries and [`Client::wait`]. Defaults to Tokio with `rt-tokio`.
    pub fn runtime(mut self, runtime: Runtime) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// How requests are sent. Defaults to reqwest with feature `reqwest`.
    pub fn transport(mut self, transport: impl Transport + 'static) -> Self {
        self.transport = Some(SharedTransport::new(transport));
        self
    }

    /// Checks the configuration and builds the client.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Config`] naming every missing or invalid setting.
    pub fn build(self) -> Result<Client> {
        let mut problems = Vec::new();
        let url = self.base_url.or_else(|| crate::config::env("REBUNO_URL"));
        let base = crate::config::base_url(url, &mut problems);
        let runtime = crate::config::runtime(self.runtime, &mut problems);
        let transport = crate::config::transport(self.transport, base.as_ref(), &mut problems);
        let key = unauthorized::api_key(self.api_key);
        let timeout = self.timeout.unwrap_or(crate::config::DEFAULT_TIMEOUT);
        match (base, runtime, transport) {
            (Some(base), Some(runtime), Some(transport)) if problems.is_empty() => {
                let mut exchange = Exchange::new(transport, runtime, timeout);
                if let Some(attempts) = self.max_attempts {
                    exchange.retry.attempts = attempts.max(1);
                }
                Ok(Client::from_parts(base, key, exchange))
            }
            _ => Err(Error::new(
                ErrorKind::Config,
                format!("invalid client configuration: {}", problems.join("; ")),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use http::StatusCode;

    use super::super::fake::FakeKernel;

    #[tokio::test]
    async fn max_attempts_bounds_the_tries_of_an_unavailable_kernel() {
        let unavailable = r#"{"code":"unavailable","message":"starting"}"#;
        for (attempts, tries) in [(1, 1), (0, 1), (2, 2)] {
            let kernel = FakeKernel::answering(StatusCode::SERVICE_UNAVAILABLE, unavailable);
            let client = kernel.builder().max_attempts(attempts).build().unwrap();
            let error = client.agents().await.unwrap_err();
            assert_eq!(error.status(), Some(StatusCode::SERVICE_UNAVAILABLE));
            assert_eq!(kernel.requests().len(), tries, "max_attempts({attempts})");
        }
    }
}
