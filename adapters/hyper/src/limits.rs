//! The limits a server enforces on its connections, and the hyper builder that applies them.

use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;

use crate::watchdog::IdleRules;

/// Connections served at once by default.
pub(crate) const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// How long a connection may sit with no request in flight and no bytes moving by default.
pub(crate) const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a request head may take to arrive by default.
pub(crate) const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest request head (request line and headers) by default.
pub(crate) const DEFAULT_MAX_HEADER_BYTES: usize = 16 * 1024;

/// The smallest head limit: hyper's HTTP/1 read buffer cannot be smaller.
pub(crate) const MIN_HEADER_BYTES: usize = 8 * 1024;

/// The most request headers by default.
pub(crate) const DEFAULT_MAX_HEADERS: usize = 64;

/// Concurrent HTTP/2 streams per connection.
pub(crate) const H2_MAX_CONCURRENT_STREAMS: u32 = 64;

/// The shortest interval between HTTP/2 keep-alive pings.
pub(crate) const H2_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(20);

/// How long an HTTP/2 keep-alive ping may go unanswered before the connection is closed.
pub(crate) const H2_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Every limit of one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) max_connections: usize,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) header_read_timeout: Option<Duration>,
    pub(crate) max_header_bytes: usize,
    pub(crate) max_headers: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            header_read_timeout: Some(DEFAULT_HEADER_READ_TIMEOUT),
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            max_headers: DEFAULT_MAX_HEADERS,
        }
    }
}

impl Limits {
    /// The connection limit as semaphore permits: at least one, at most what a semaphore holds.
    pub(crate) fn connection_slots(&self) -> usize {
        self.max_connections
            .clamp(1, tokio::sync::Semaphore::MAX_PERMITS)
    }

    /// What the per-connection watchdog enforces.
    pub(crate) fn idle_rules(&self) -> IdleRules {
        IdleRules {
            idle: self.idle_timeout,
            next_request: self.header_read_timeout,
        }
    }

    /// The head limit hyper can take: never below its 8 KiB minimum (it panics under it), and
    /// within what HTTP/2 settings carry.
    pub(crate) fn header_bytes(&self) -> usize {
        self.max_header_bytes
            .clamp(MIN_HEADER_BYTES, u32::MAX as usize)
    }

    /// Pings are sent only after this long without frames from the client, longer than the
    /// idle timeout, so an idle connection is closed before a ping would keep it looking busy;
    /// they still find dead clients during a long request.
    pub(crate) fn h2_keep_alive_interval(&self) -> Duration {
        let past_idle = self
            .idle_timeout
            .map_or(Duration::ZERO, |idle| idle.saturating_mul(2));
        H2_KEEP_ALIVE_INTERVAL.max(past_idle)
    }

    /// A hyper builder (HTTP/1 and h2c) that applies these limits.
    pub(crate) fn builder(&self) -> auto::Builder<TokioExecutor> {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        let header_bytes = self.header_bytes();
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_read_timeout)
            .max_buf_size(header_bytes)
            .max_headers(self.max_headers);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(H2_MAX_CONCURRENT_STREAMS)
            .max_header_list_size(u32::try_from(header_bytes).unwrap_or(u32::MAX))
            .keep_alive_interval(self.h2_keep_alive_interval())
            .keep_alive_timeout(H2_KEEP_ALIVE_TIMEOUT);
        builder
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_limits_below_hypers_minimum_are_raised_to_it() {
        for asked in [0, 1, 8191] {
            let limits = Limits {
                max_header_bytes: asked,
                ..Limits::default()
            };
            assert_eq!(limits.header_bytes(), MIN_HEADER_BYTES);
            // Building must not panic on any user input.
            let _ = limits.builder();
        }
        let huge = Limits {
            max_header_bytes: usize::MAX,
            ..Limits::default()
        };
        assert_eq!(huge.header_bytes(), u32::MAX as usize);
        let _ = huge.builder();
    }

    #[test]
    fn a_zero_connection_limit_still_serves_one() {
        let limits = Limits {
            max_connections: 0,
            ..Limits::default()
        };
        assert_eq!(limits.connection_slots(), 1);
    }

    #[test]
    fn h2_pings_wait_longer_than_the_idle_timeout() {
        let mut limits = Limits::default();
        assert_eq!(limits.h2_keep_alive_interval(), H2_KEEP_ALIVE_INTERVAL);
        limits.idle_timeout = Some(Duration::from_secs(60));
        assert_eq!(limits.h2_keep_alive_interval(), Duration::from_secs(120));
        limits.idle_timeout = None;
        assert_eq!(limits.h2_keep_alive_interval(), H2_KEEP_ALIVE_INTERVAL);
    }
}
