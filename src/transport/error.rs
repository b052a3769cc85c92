//! [`TransportError`]: a request that got no HTTP response, and why.

use std::fmt;

use crate::error::BoxError;

/// Why a request got no response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportErrorKind {
    /// The connection could not be made: the request never reached the server.
    Connect,
    /// No response within the timeout: the request may or may not have been processed.
    Timeout,
    /// Anything else after the request may have been sent.
    Other,
}

/// A request that got no HTTP response.
#[derive(Debug)]
pub struct TransportError {
    kind: TransportErrorKind,
    source: BoxError,
}

impl TransportError {
    /// Wraps the underlying client's error.
    ///
    /// A TLS handshake that met a plain-HTTP server (an `https://` URL for a server without
    /// TLS, such as `rebuno-dev`) gets a cause that says so and what to change, in place of
    /// the TLS library's `received corrupt message of type InvalidContentType`.
    pub fn new(kind: TransportErrorKind, source: impl Into<BoxError>) -> Self {
        let source = source.into();
        let source = match plain_http_answer(&*source) {
            Some(detail) => Box::new(PlainHttpAnswer(detail)) as BoxError,
            None => source,
        };
        Self { kind, source }
    }

    /// What went wrong.
    pub fn kind(&self) -> TransportErrorKind {
        self.kind
    }

    /// Whether the server certainly never saw the request.
    pub fn is_connect(&self) -> bool {
        self.kind == TransportErrorKind::Connect
    }

    /// Whether the URL was `https://` and the server answered in plain HTTP: a mistake in the
    /// URL that waiting will not fix.
    pub(crate) fn is_plain_http_answer(&self) -> bool {
        self.source.is::<PlainHttpAnswer>()
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            TransportErrorKind::Connect => f.write_str("could not connect"),
            TransportErrorKind::Timeout => f.write_str("request timed out"),
            TransportErrorKind::Other => f.write_str("request failed"),
        }
    }
}

/// What TLS libraries say when a server answers their handshake in plain HTTP: rustls reads
/// `HTTP/1.1 400` as a record of an unknown content type; OpenSSL and BoringSSL call it a wrong
/// version number.
const PLAIN_HTTP_SIGNS: [&str; 3] = [
    "InvalidContentType",
    "wrong version number",
    "WRONG_VERSION_NUMBER",
];

/// The TLS library's text, when `error` (or a cause of it) is a handshake that met plain HTTP.
fn plain_http_answer(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut current = Some(error);
    while let Some(error) = current {
        let text = error.to_string();
        if PLAIN_HTTP_SIGNS.iter().any(|sign| text.contains(sign)) {
            return Some(text);
        }
        current = error.source();
    }
    None
}

/// The cause of a [`TransportError`] for a TLS handshake answered in plain HTTP.
#[derive(Debug)]
struct PlainHttpAnswer(String);

impl fmt::Display for PlainHttpAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the URL is https:// but the server answered in plain HTTP ({}): use http:// in the \
             URL (rebuno-dev serves plain HTTP), or serve the kernel over TLS",
            self.0
        )
    }
}

impl std::error::Error for PlainHttpAnswer {}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tls_handshake_answered_in_plain_http_says_what_to_change() {
        let rustls = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "received corrupt message of type InvalidContentType",
        );
        let error = TransportError::new(TransportErrorKind::Connect, rustls);
        let cause = std::error::Error::source(&error).map(ToString::to_string);
        let cause = cause.unwrap_or_default();
        assert!(cause.contains("use http://"), "{cause}");
        assert!(cause.contains("InvalidContentType"), "{cause}");
        assert!(error.is_connect());
        let refused = TransportError::new(TransportErrorKind::Connect, "connection refused");
        let cause = std::error::Error::source(&refused).map(ToString::to_string);
        assert_eq!(cause.as_deref(), Some("connection refused"));
    }
}
