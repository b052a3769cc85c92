//! A minimal HTTP/1.1 client for the tests (one request per connection, `Connection: close`),
//! and Connect envelope decoding.

use std::net::SocketAddr;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A response: status, body, and whether the body ended cleanly.
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
    pub(crate) complete: bool,
}

impl Reply {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    /// The Connect envelopes of a streamed body: (flags, JSON).
    pub(crate) fn envelopes(&self) -> Vec<(u8, Value)> {
        let mut out = Vec::new();
        let mut rest = self.body.as_slice();
        while rest.len() >= 5 {
            let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
            let payload = &rest[5..5 + len];
            out.push((rest[0], serde_json::from_slice(payload).unwrap()));
            rest = &rest[5 + len..];
        }
        out
    }
}

/// Sends one request.
pub(crate) async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut raw = Vec::new();
    let read_ok = stream.read_to_end(&mut raw).await.is_ok();
    parse(&raw, read_ok)
}

fn parse(raw: &[u8], read_ok: bool) -> Reply {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let rest = &raw[split + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let (body, complete) = if chunked {
        dechunk(rest)
    } else {
        (rest.to_vec(), read_ok)
    };
    Reply {
        status,
        body,
        complete: complete && read_ok,
    }
}

/// A chunked body, and whether its last chunk arrived.
fn dechunk(mut rest: &[u8]) -> (Vec<u8>, bool) {
    let mut body = Vec::new();
    loop {
        let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") else {
            return (body, false);
        };
        let size = usize::from_str_radix(String::from_utf8_lossy(&rest[..line_end]).trim(), 16)
            .unwrap_or(0);
        if size == 0 {
            return (body, line_end > 0);
        }
        let start = line_end + 2;
        if rest.len() < start + size {
            body.extend_from_slice(&rest[start..]);
            return (body, false);
        }
        body.extend_from_slice(&rest[start..start + size]);
        rest = rest.get(start + size + 2..).unwrap_or_default();
    }
}

/// One Connect envelope.
pub(crate) fn envelope(json: &str) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&(json.len() as u32).to_be_bytes());
    out.extend_from_slice(json.as_bytes());
    out
}
