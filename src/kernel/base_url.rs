//! The kernel's base URL, split so the signed request target includes any path prefix.

use http::Uri;

use crate::error::{Error, ErrorKind, Result};

/// `scheme://authority` plus an optional path prefix without a trailing slash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BaseUrl {
    origin: String,
    prefix: String,
}

impl BaseUrl {
    /// Parses `http://host:port[/prefix]`.
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let invalid =
            |why: &str| Error::new(ErrorKind::Config, format!("kernel URL {url:?} {why}"));
        let uri: Uri = url
            .trim()
            .parse()
            .map_err(|_| invalid("is not a valid URL"))?;
        let scheme = uri.scheme_str().ok_or_else(|| invalid("has no scheme"))?;
        if scheme != "http" && scheme != "https" {
            return Err(invalid("must use http or https"));
        }
        let authority = uri.authority().ok_or_else(|| invalid("has no host"))?;
        if uri.query().is_some() {
            return Err(invalid("must not have a query"));
        }
        Ok(Self {
            origin: format!("{scheme}://{authority}"),
            prefix: uri.path().trim_end_matches('/').to_owned(),
        })
    }

    /// The request target to sign and send: prefix + path (path starts with `/v0/`).
    pub(crate) fn target(&self, path: &str) -> String {
        format!("{}{path}", self.prefix)
    }

    /// The absolute URI of a request target.
    pub(crate) fn uri(&self, target: &str) -> String {
        format!("{}{target}", self.origin)
    }

    /// Whether the kernel is reached over TLS.
    pub(crate) fn is_https(&self) -> bool {
        self.origin.starts_with("https://")
    }

    /// The URL as configured, without a trailing slash.
    pub(crate) fn as_string(&self) -> String {
        format!("{}{}", self.origin, self.prefix)
    }
}

/// Percent-encodes one path segment (everything but RFC 3986 unreserved characters).
pub(crate) fn encode_segment(segment: &str) -> String {
    if segment.bytes().all(unreserved) {
        // Ids (UUIDs, step ids) always take this path: one copy, no per-byte pushes.
        return segment.to_owned();
    }
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(segment.len() * 3);
    for byte in segment.bytes() {
        if unreserved(byte) {
            out.push(char::from(byte));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
    }
    out
}

/// Decodes the `%XX` escapes of one path segment (for messages; an invalid escape stays as it
/// is, and bytes that are no UTF-8 become U+FFFD).
pub(crate) fn decode_segment(segment: &str) -> String {
    if !segment.contains('%') {
        return segment.to_owned();
    }
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let escaped = bytes
            .get(at + 1..at + 3)
            .filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (bytes[at], escaped) {
            (b'%', Some(byte)) => {
                out.push(byte);
                at += 3;
            }
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// RFC 3986 unreserved characters, which a path segment carries as they are.
fn unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_part_of_the_signed_target() {
        let base = BaseUrl::parse("http://kernel:8080/prefix/").unwrap();
        assert_eq!(base.target("/v0/executions/e"), "/prefix/v0/executions/e");
        assert_eq!(
            base.uri(&base.target("/v0/x")),
            "http://kernel:8080/prefix/v0/x"
        );
        assert_eq!(BaseUrl::parse("http://k").unwrap().target("/v0/x"), "/v0/x");
    }

    #[test]
    fn bad_urls_are_config_errors() {
        for url in ["", "kernel:8080", "ftp://k", "http://k/?q=1"] {
            assert_eq!(
                BaseUrl::parse(url).unwrap_err().kind(),
                ErrorKind::Config,
                "{url}"
            );
        }
    }

    #[test]
    fn segments_are_escaped() {
        assert_eq!(encode_segment("alpha/beta gamma"), "alpha%2Fbeta%20gamma");
        assert_eq!(encode_segment("a-b_c.d~e"), "a-b_c.d~e");
        assert_eq!(encode_segment("é?"), "%C3%A9%3F");
    }

    #[test]
    fn segments_decode_back() {
        for segment in ["alpha/beta gamma", "a-b_c.d~e", "é?", ""] {
            assert_eq!(decode_segment(&encode_segment(segment)), segment);
        }
        assert_eq!(decode_segment("50%"), "50%");
        assert_eq!(decode_segment("%zz%4%+1"), "%zz%4%+1");
    }
}
