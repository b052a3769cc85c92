//! When and how long to wait before sending a kernel request again.

use std::time::Duration;

use http::StatusCode;

use crate::transport::TransportError;

/// Whether a request may safely be sent twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replayable {
    /// Reads and mutations the kernel deduplicates (step outcomes, heartbeats, completion).
    Yes,
    /// A step submit: a second copy could be counted as a new occurrence, so it is only retried
    /// when the kernel certainly did not process the first.
    OnlyIfUnseen,
    /// Best-effort traffic (live stream deltas): sent once, never retried.
    Never,
}

/// Exponential backoff for kernel requests: 250 ms doubling to 8 s, 6 tries in all.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    pub(crate) attempts: u32,
    pub(crate) first_delay: Duration,
    pub(crate) max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 6,
            first_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(8),
        }
    }
}

impl RetryPolicy {
    /// The wait before try number `retry` (1 = the first retry).
    pub(crate) fn delay(&self, retry: u32) -> Duration {
        let factor = 2u32.saturating_pow(retry.saturating_sub(1));
        self.first_delay.saturating_mul(factor).min(self.max_delay)
    }

    /// Whether a request that got no response is sent again. Never when the URL is `https://`
    /// and the server answered in plain HTTP: that will not change by waiting, so the clear
    /// error comes at once instead of after six tries (about 8 s).
    pub(crate) fn retry_transport(&self, error: &TransportError, replayable: Replayable) -> bool {
        if error.is_plain_http_answer() {
            return false;
        }
        match replayable {
            Replayable::Yes => true,
            Replayable::OnlyIfUnseen => error.is_connect(),
            Replayable::Never => false,
        }
    }

    pub(crate) fn retry_status(&self, status: StatusCode, replayable: Replayable) -> bool {
        match status {
            StatusCode::SERVICE_UNAVAILABLE => replayable != Replayable::Never,
            StatusCode::BAD_GATEWAY | StatusCode::GATEWAY_TIMEOUT => replayable == Replayable::Yes,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap() {
        let policy = RetryPolicy::default();
        let delays: Vec<_> = (1..=6).map(|n| policy.delay(n).as_millis()).collect();
        assert_eq!(delays, [250, 500, 1000, 2000, 4000, 8000]);
    }

    #[test]
    fn submits_are_retried_only_when_unseen() {
        use crate::transport::TransportErrorKind;
        let policy = RetryPolicy::default();
        let timeout = TransportError::new(TransportErrorKind::Timeout, "t");
        let refused = TransportError::new(TransportErrorKind::Connect, "c");
        assert!(!policy.retry_transport(&timeout, Replayable::OnlyIfUnseen));
        assert!(policy.retry_transport(&refused, Replayable::OnlyIfUnseen));
        assert!(policy.retry_transport(&timeout, Replayable::Yes));
        assert!(!policy.retry_status(StatusCode::BAD_GATEWAY, Replayable::OnlyIfUnseen));
        assert!(!policy.retry_status(StatusCode::CONFLICT, Replayable::Yes));
        assert!(!policy.retry_transport(&refused, Replayable::Never));
        assert!(!policy.retry_status(StatusCode::SERVICE_UNAVAILABLE, Replayable::Never));
    }

    #[test]
    fn a_tls_handshake_answered_in_plain_http_is_not_retried() {
        use crate::transport::TransportErrorKind;
        let policy = RetryPolicy::default();
        for kind in [TransportErrorKind::Connect, TransportErrorKind::Other] {
            // What rustls says when a server answers its handshake in plain HTTP.
            let rustls = std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "received corrupt message of type InvalidContentType",
            );
            let error = TransportError::new(kind, rustls);
            assert!(error.is_plain_http_answer(), "{kind:?}");
            for replayable in [Replayable::Yes, Replayable::OnlyIfUnseen] {
                assert!(!policy.retry_transport(&error, replayable), "{kind:?}");
            }
        }
        let refused = TransportError::new(TransportErrorKind::Connect, "connection refused");
        assert!(!refused.is_plain_http_answer());
        assert!(policy.retry_transport(&refused, Replayable::Yes));
    }
}
