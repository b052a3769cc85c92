//! The two text encodings the E2B protocols need and the crate has no dependency for:
//! percent-encoding (URL paths and query values) and base64 (proto3 JSON `bytes`).

use std::fmt::Write as _;

/// `value` with every byte outside RFC 3986's unreserved set percent-encoded: safe as a query
/// value and as one path segment.
pub(super) fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// Decodes base64 as proto3 JSON parsers accept it: the standard or the URL-safe alphabet,
/// with or without padding. `None` when `text` is not base64.
pub(super) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut buffer = 0u32;
    let mut bits = 0u32;
    for byte in text.bytes() {
        buffer = (buffer << 6) | u32::from(sextet(byte)?);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    // One leftover character (6 bits) cannot end a valid encoding.
    (bits < 6).then_some(out)
}

/// The value of one base64 character, in either alphabet.
fn sextet(byte: u8) -> Option<u8> {
    match byte {
        b'A'..=b'Z' => Some(byte - b'A'),
        b'a'..=b'z' => Some(byte - b'a' + 26),
        b'0'..=b'9' => Some(byte - b'0' + 52),
        b'+' | b'-' => Some(62),
        b'/' | b'_' => Some(63),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_encoding_keeps_only_unreserved_bytes() {
        assert_eq!(percent_encode("a-b_c.d~e"), "a-b_c.d~e");
        assert_eq!(
            percent_encode("/home/user/my file.txt"),
            "%2Fhome%2Fuser%2Fmy%20file.txt"
        );
        assert_eq!(percent_encode("é&="), "%C3%A9%26%3D");
    }

    #[test]
    fn base64_decodes_both_alphabets_with_or_without_padding() {
        assert_eq!(base64_decode("aGVsbG8K").as_deref(), Some(&b"hello\n"[..]));
        assert_eq!(base64_decode("aGk=").as_deref(), Some(&b"hi"[..]));
        assert_eq!(base64_decode("aGk").as_deref(), Some(&b"hi"[..]));
        assert_eq!(base64_decode("+/8=").as_deref(), Some(&[0xfb, 0xff][..]));
        assert_eq!(base64_decode("-_8").as_deref(), Some(&[0xfb, 0xff][..]));
        assert_eq!(base64_decode("").as_deref(), Some(&[][..]));
        assert_eq!(base64_decode("a"), None);
        assert_eq!(base64_decode("a*b="), None);
    }
}
