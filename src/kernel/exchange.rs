//! Sending a request to the kernel: build afresh per try, retry with backoff, map errors.

use std::time::Duration;

use bytes::Bytes;

use super::error_from_response;
use super::explain::explain;
use super::retry::{Replayable, RetryPolicy};
use crate::error::{Error, ErrorKind, Result};
use crate::rt::Runtime;
use crate::transport::{SharedTransport, TransportError};

/// The transport, runtime and limits shared by the agent's and the client's requests.
#[derive(Clone, Debug)]
pub(crate) struct Exchange {
    pub(crate) transport: SharedTransport,
    pub(crate) runtime: Runtime,
    pub(crate) timeout: Duration,
    pub(crate) retry: RetryPolicy,
}

impl Exchange {
    pub(crate) fn new(transport: SharedTransport, runtime: Runtime, timeout: Duration) -> Self {
        Self {
            transport,
            runtime,
            timeout,
            retry: RetryPolicy::default(),
        }
    }

    /// Sends the request `build` makes, building it again for every retry (so each try gets a
    /// fresh timestamp and signature), while the kernel is unreachable or unavailable.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Network`] when no response came; the mapped envelope for a status ≥ 300,
    /// explained for the request (`explain`: the id a `404` concerns, the scope a `403` lacks).
    pub(crate) async fn send(
        &self,
        replayable: Replayable,
        build: impl Fn() -> Result<http::Request<Bytes>>,
    ) -> Result<http::Response<Bytes>> {
        self.send_paced(&self.pace(), replayable, build).await
    }

    /// The exchange's own retries and per-try timeout.
    pub(crate) fn pace(&self) -> Pace {
        Pace {
            retry: self.retry,
            timeout: self.timeout,
        }
    }

    /// [`Exchange::send`] with the retries and per-try timeout of `pace`.
    pub(crate) async fn send_paced(
        &self,
        pace: &Pace,
        replayable: Replayable,
        build: impl Fn() -> Result<http::Request<Bytes>>,
    ) -> Result<http::Response<Bytes>> {
        let retry = &pace.retry;
        let mut tries = 1;
        loop {
            let request = build()?;
            let uri = (tries == 1).then(|| request.uri().clone());
            let outcome = self.transport.send(request, pace.timeout).await;
            let again = match &outcome {
                Ok(response) => retry.retry_status(response.status(), replayable),
                Err(error) => retry.retry_transport(error, replayable),
            };
            if !again || tries >= retry.attempts {
                return finish(outcome, &build);
            }
            match uri {
                Some(uri) => log_first_failure(&uri, &outcome, retry),
                None => tracing::debug!(tries, "kernel request failed; retrying"),
            }
            crate::observe::kernel_retry();
            self.runtime.sleep(retry.delay(tries)).await;
            tries += 1;
        }
    }
}

/// How a request is retried and how long each try may take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pace {
    pub(crate) retry: RetryPolicy,
    pub(crate) timeout: Duration,
}

/// The first failure of a kernel request, at warn with the kernel's URL, so a wrong
/// `REBUNO_URL` or a kernel that is down shows at once, not after the last try.
fn log_first_failure(
    uri: &http::Uri,
    outcome: &std::result::Result<http::Response<Bytes>, TransportError>,
    retry: &RetryPolicy,
) {
    let kernel = format!(
        "{}://{}",
        uri.scheme_str().unwrap_or("http"),
        uri.authority().map_or("", |authority| authority.as_str())
    );
    let retrying = retrying(retry);
    match outcome {
        Ok(response) => tracing::warn!(
            path = uri.path(),
            status = response.status().as_u16(),
            "the kernel at {kernel} answered {}; {retrying}",
            response.status()
        ),
        Err(error) => tracing::warn!(
            path = uri.path(),
            error = crate::error::error_chain(error),
            "the kernel at {kernel} did not answer; {retrying}: if this persists, check that \
             REBUNO_URL is the kernel's URL and that this host can reach it"
        ),
    }
}

/// `retrying for about 8 s (6 tries)`: how long the retries of `retry` wait in all.
fn retrying(retry: &RetryPolicy) -> String {
    let waits: Duration = (1..retry.attempts).map(|n| retry.delay(n)).sum();
    let about = if waits < Duration::from_secs(1) {
        format!("{} ms", waits.as_millis())
    } else {
        format!("{:.0} s", waits.as_secs_f64())
    };
    format!("retrying for about {about} ({} tries)", retry.attempts)
}

/// A kernel request that got no answer.
pub(crate) fn network_error(error: TransportError) -> Error {
    Error::new(ErrorKind::Network, error.to_string()).with_source(error)
}

/// The response, or the error it stands for. An error is explained for its request, which
/// `build` makes again (it was sent away), only on this path.
fn finish(
    outcome: std::result::Result<http::Response<Bytes>, TransportError>,
    build: impl Fn() -> Result<http::Request<Bytes>>,
) -> Result<http::Response<Bytes>> {
    let response = outcome.map_err(network_error)?;
    if response.status().as_u16() >= 300 {
        let error = error_from_response(response.status(), response.body());
        return Err(match build() {
            Ok(request) => explain(error, &request),
            Err(_) => error,
        });
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_says_how_long_the_retries_last() {
        let policy = RetryPolicy::default();
        assert_eq!(retrying(&policy), "retrying for about 8 s (6 tries)");
        let short = RetryPolicy {
            attempts: 2,
            ..policy
        };
        assert_eq!(retrying(&short), "retrying for about 250 ms (2 tries)");
    }
}
