//! `multipart/form-data` bodies (envd's uploads): a small parser for whole, buffered bodies.

use serde_json::{Value, json};

/// One part of a multipart body.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Part<'a> {
    pub(crate) name: Option<String>,
    pub(crate) filename: Option<String>,
    pub(crate) content_type: Option<String>,
    pub(crate) data: &'a [u8],
}

impl Part<'_> {
    /// What the capture records of a part: its names and size, not its bytes.
    pub(crate) fn summary(&self) -> Value {
        json!({
            "name": self.name,
            "filename": self.filename,
            "content_type": self.content_type,
            "size": self.data.len(),
        })
    }
}

/// The `boundary` parameter of a multipart content type.
pub(crate) fn boundary(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|param| {
        let (key, value) = param.split_once('=')?;
        key.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| unquote(value.trim()))
    })
}

/// The parts of a body delimited by `boundary`.
pub(crate) fn parse<'a>(body: &'a [u8], boundary: &str) -> Result<Vec<Part<'a>>, String> {
    let delimiter = format!("--{boundary}");
    let delimiter = delimiter.as_bytes();
    let mut pos = find(body, delimiter, 0).ok_or("multipart: NextPart: EOF")? + delimiter.len();
    let mut parts = Vec::new();
    loop {
        if body[pos..].starts_with(b"--") {
            return Ok(parts);
        }
        pos +=
            line_break(&body[pos..]).ok_or("multipart: boundary not followed by a line break")?;
        let head_end = find(body, b"\r\n\r\n", pos).ok_or("multipart: malformed part headers")?;
        let head = String::from_utf8_lossy(&body[pos..head_end]).into_owned();
        let data_start = head_end + 4;
        let mut closing = b"\r\n".to_vec();
        closing.extend_from_slice(delimiter);
        let data_end =
            find(body, &closing, data_start).ok_or("multipart: unexpected end of body")?;
        parts.push(part(&head, &body[data_start..data_end]));
        pos = data_end + closing.len();
    }
}

fn part<'a>(head: &str, data: &'a [u8]) -> Part<'a> {
    let mut part = Part {
        name: None,
        filename: None,
        content_type: None,
        data,
    };
    for line in head.split("\r\n") {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        if key.trim().eq_ignore_ascii_case("content-type") {
            part.content_type = Some(value.trim().to_owned());
        } else if key.trim().eq_ignore_ascii_case("content-disposition") {
            for param in split_params(value).into_iter().skip(1) {
                match param.split_once('=') {
                    Some((k, v)) if k.trim().eq_ignore_ascii_case("name") => {
                        part.name = Some(unquote(v.trim()))
                    }
                    Some((k, v)) if k.trim().eq_ignore_ascii_case("filename") => {
                        part.filename = Some(unquote(v.trim()))
                    }
                    _ => {}
                }
            }
        }
    }
    part
}

/// Splits header parameters on `;` outside quotes.
fn split_params(value: &str) -> Vec<String> {
    let (mut params, mut current, mut quoted, mut escaped) =
        (Vec::new(), String::new(), false, false);
    for c in value.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ';' if !quoted => {
                params.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    params.push(current);
    params
}

fn unquote(value: &str) -> String {
    let Some(inner) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) else {
        return value.to_owned();
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        out.push(if c == '\\' {
            chars.next().unwrap_or('\\')
        } else {
            c
        });
    }
    out
}

fn line_break(rest: &[u8]) -> Option<usize> {
    if rest.starts_with(b"\r\n") {
        Some(2)
    } else if rest.starts_with(b"\n") {
        Some(1)
    } else {
        None
    }
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_an_httpx_style_upload() {
        let ct = "multipart/form-data; boundary=\"b0\"";
        let body = b"--b0\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/home/user/a;b.txt\"\r\nContent-Type: application/octet-stream\r\n\r\nhello\r\n--b0\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\n\r\n--b0--\r\n";
        let parts = parse(body, &boundary(ct).unwrap()).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].name.as_deref(), Some("file"));
        assert_eq!(parts[0].filename.as_deref(), Some("/home/user/a;b.txt"));
        assert_eq!(parts[0].data, b"hello");
        assert_eq!(parts[1].data, b"");
        assert_eq!(parts[0].summary()["size"], 5);
        assert!(parse(b"--b0\r\nbroken", "b0").is_err());
        assert!(parse(b"nothing", "b0").is_err());
    }
}
