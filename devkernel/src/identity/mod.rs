//! Step identity (PROTOCOL.md §1.5): canonical JSON, `args_hash` and `step_id`.
//!
//! The kernel decodes `args` keeping every number literal verbatim (Go's `json.Number`) and
//! re-encodes it with sorted object keys, no whitespace and Go `encoding/json` string escaping.
//! `args_hash` is the hex SHA-256 of that text; `step_id` is the hex SHA-256 over the
//! length-prefixed fields `execution_id, kind, target, args_hash, occurrence`.
//!
//! The parser here is deliberately small and self-contained: enabling serde_json's
//! `arbitrary_precision` would change number handling for the whole workspace.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Why `args` could not be canonicalized.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid JSON at byte {offset}")]
pub struct CanonicalError {
    /// Byte offset of the first problem.
    pub offset: usize,
}

/// The canonical JSON text of `raw` (`null` for empty input).
///
/// ```
/// use rebuno_devkernel::identity::canonical_json;
/// assert_eq!(canonical_json(br#"{"b": 2, "a": 1.50}"#).unwrap(), r#"{"a":1.50,"b":2}"#);
/// assert_eq!(canonical_json(b"").unwrap(), "null");
/// ```
///
/// # Errors
///
/// [`CanonicalError`] when `raw` is not a single valid JSON value.
pub fn canonical_json(raw: &[u8]) -> Result<String, CanonicalError> {
    let mut parser = Parser {
        src: raw,
        pos: 0,
        depth: 0,
    };
    parser.skip_ws();
    if parser.pos == raw.len() {
        return Ok("null".to_owned());
    }
    let node = parser.value()?;
    parser.skip_ws();
    if parser.pos != raw.len() {
        return Err(parser.error());
    }
    let mut out = String::with_capacity(raw.len());
    node.encode(&mut out);
    Ok(out)
}

/// `args_hash`: lowercase hex SHA-256 of [`canonical_json`] of `raw`.
///
/// # Errors
///
/// [`CanonicalError`] when `raw` is not valid JSON.
pub fn args_hash(raw: &[u8]) -> Result<String, CanonicalError> {
    Ok(sha256_hex(canonical_json(raw)?.as_bytes()))
}

/// `step_id`: hex SHA-256 of `"<len>:<field>"` over the five identity fields.
///
/// ```
/// use rebuno_devkernel::identity::step_id;
/// let id = step_id(
///     "0192f1a0-0000-7000-8000-000000000000",
///     "tool_call",
///     "search",
///     "bf3ba9c43a8ebae5896cd3208cc0b012785dc411e7ebc2a6511145e91e031f78",
///     0,
/// );
/// assert_eq!(id, "66521f99e59c0a40d6a02e5e7af14682c3191d9761292dfc62e169bbbd752699");
/// ```
pub fn step_id(
    execution_id: &str,
    kind: &str,
    target: &str,
    args_hash: &str,
    occurrence: u32,
) -> String {
    let occurrence = occurrence.to_string();
    let mut hasher = Sha256::new();
    for field in [execution_id, kind, target, args_hash, occurrence.as_str()] {
        hasher.update(field.len().to_string().as_bytes());
        hasher.update(b":");
        hasher.update(field.as_bytes());
    }
    hex(&hasher.finalize())
}

/// Whether `a` equals `b`, in time independent of where they differ (`subtle`'s
/// `ConstantTimeEq`). Only the lengths are compared early: a length is no secret.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

/// Lowercase hex SHA-256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lowercase hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

/// A decoded JSON value that keeps number literals as written.
enum Node<'a> {
    Literal(&'a str),
    String(String),
    Array(Vec<Node<'a>>),
    Object(Vec<(String, Node<'a>)>),
}

impl Node<'_> {
    fn encode(&self, out: &mut String) {
        match self {
            Node::Literal(text) => out.push_str(text),
            Node::String(text) => encode_string(text, out),
            Node::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.encode(out);
                }
                out.push(']');
            }
            Node::Object(members) => {
                out.push('{');
                for (i, (key, value)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    encode_string(key, out);
                    out.push(':');
                    value.encode(out);
                }
                out.push('}');
            }
        }
    }
}

/// Go `encoding/json` string escaping (HTML-safe, Go ≥ 1.22 short escapes).
fn encode_string(text: &str, out: &mut String) {
    out.push('"');
    for ch in text.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => push_u_escape(u32::from(ch), out),
            c if u32::from(c) < 0x20 => push_u_escape(u32::from(c), out),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn push_u_escape(code: u32, out: &mut String) {
    out.push_str(&format!("\\u{code:04x}"));
}

/// The deepest nesting accepted. The parser, the encoder and `Node`'s drop recurse once per
/// level, so without a bound a 40 KB body of brackets overflowed a 2 MiB worker stack and
/// aborted the kernel. Go's `encoding/json` allows 10,000 levels; no real arguments come close
/// to this one.
const MAX_DEPTH: usize = 512;

struct Parser<'a> {
    src: &'a [u8],
    pos: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    fn error(&self) -> CanonicalError {
        CanonicalError { offset: self.pos }
    }

    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), CanonicalError> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error())
        }
    }

    fn value(&mut self) -> Result<Node<'a>, CanonicalError> {
        self.skip_ws();
        match self.peek() {
            Some(b'{') => self.nested(Self::object),
            Some(b'[') => self.nested(Self::array),
            Some(b'"') => Ok(Node::String(self.string()?)),
            Some(b't') => self.keyword("true"),
            Some(b'f') => self.keyword("false"),
            Some(b'n') => self.keyword("null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.error()),
        }
    }

    /// Parses an array or object one level deeper, refusing past [`MAX_DEPTH`].
    fn nested(
        &mut self,
        parse: fn(&mut Self) -> Result<Node<'a>, CanonicalError>,
    ) -> Result<Node<'a>, CanonicalError> {
        if self.depth == MAX_DEPTH {
            return Err(self.error());
        }
        self.depth += 1;
        let node = parse(self);
        self.depth -= 1;
        node
    }

    fn keyword(&mut self, word: &'static str) -> Result<Node<'a>, CanonicalError> {
        if self.src[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(Node::Literal(word))
        } else {
            Err(self.error())
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<Node<'a>, CanonicalError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.error()),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return Err(self.error());
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.error());
            }
        }
        let text = std::str::from_utf8(&self.src[start..self.pos]).map_err(|_| self.error())?;
        Ok(Node::Literal(text))
    }

    fn array(&mut self) -> Result<Node<'a>, CanonicalError> {
        self.expect(b'[')?;
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Node::Array(items));
        }
        loop {
            items.push(self.value()?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Node::Array(items));
                }
                _ => return Err(self.error()),
            }
        }
    }

    fn object(&mut self) -> Result<Node<'a>, CanonicalError> {
        self.expect(b'{')?;
        let mut members: Vec<(String, Node<'a>)> = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Node::Object(members));
        }
        loop {
            self.skip_ws();
            let key = self.string()?;
            self.skip_ws();
            self.expect(b':')?;
            let value = self.value()?;
            // Decoding into a map: the last duplicate wins.
            members.retain(|(k, _)| *k != key);
            members.push((key, value));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    members.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                    return Ok(Node::Object(members));
                }
                _ => return Err(self.error()),
            }
        }
    }

    fn string(&mut self) -> Result<String, CanonicalError> {
        self.expect(b'"')?;
        let mut out = Vec::new();
        loop {
            let byte = self.peek().ok_or_else(|| self.error())?;
            self.pos += 1;
            match byte {
                b'"' => break,
                b'\\' => self.escape(&mut out)?,
                0x00..=0x1f => return Err(self.error()),
                _ => out.push(byte),
            }
        }
        // Invalid UTF-8 becomes U+FFFD, as in Go.
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    fn escape(&mut self, out: &mut Vec<u8>) -> Result<(), CanonicalError> {
        let byte = self.peek().ok_or_else(|| self.error())?;
        self.pos += 1;
        let simple = match byte {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let ch = self.unicode_escape()?;
                let mut buf = [0u8; 4];
                out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                return Ok(());
            }
            _ => return Err(self.error()),
        };
        out.push(simple);
        Ok(())
    }

    fn hex4(&mut self) -> Result<u32, CanonicalError> {
        let digits = self
            .src
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.error())?;
        let text = std::str::from_utf8(digits).map_err(|_| self.error())?;
        let value = u32::from_str_radix(text, 16).map_err(|_| self.error())?;
        if !digits.iter().all(u8::is_ascii_hexdigit) {
            return Err(self.error());
        }
        self.pos += 4;
        Ok(value)
    }

    /// `\uXXXX`, combining a surrogate pair; a lone surrogate becomes U+FFFD (Go behaviour).
    fn unicode_escape(&mut self) -> Result<char, CanonicalError> {
        let first = self.hex4()?;
        if (0xD800..0xDC00).contains(&first) && self.src[self.pos..].starts_with(b"\\u") {
            let save = self.pos;
            self.pos += 2;
            let second = self.hex4()?;
            if (0xDC00..0xE000).contains(&second) {
                let code = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
                return Ok(char::from_u32(code).unwrap_or('\u{FFFD}'));
            }
            self.pos = save;
        }
        Ok(char::from_u32(first).unwrap_or('\u{FFFD}'))
    }
}

#[cfg(test)]
mod tests;
