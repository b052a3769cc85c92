//! The agent → kernel proxy: one per agent slot, HTTP/1.1 over raw TCP so it can cut a request
//! or a response after any number of bytes, and stall all traffic (a kernel "freeze").
//!
//! Each settle call (`.../steps/{id}/complete|fail`, `.../complete|fail`) that reaches the
//! kernel is written to the ledger with its lease and the kernel's answer, for the fencing check.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use crate::ledger::{Ledger, SettleCall};
use rebuno_campaign::Rng;

/// A parsed HTTP/1.1 message, kept as its raw bytes.
struct Message {
    raw: Vec<u8>,
    start: String,
    headers: Vec<(String, String)>,
    close: bool,
}

impl Message {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn body(&self) -> &[u8] {
        let end = self
            .raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(self.raw.len(), |p| p + 4);
        &self.raw[end..]
    }
}

/// Reads one message; `None` on a clean EOF before the first byte. `response_to` is the request
/// method when reading a response.
async fn read_message<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    response_to: Option<&str>,
) -> std::io::Result<Option<Message>> {
    let mut raw = Vec::new();
    let Some((start, headers)) = read_head(reader, &mut raw).await? else {
        return Ok(None);
    };
    let find = |name: &str| {
        headers
            .iter()
            .find(|(k, _): &&(String, String)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.to_ascii_lowercase())
    };
    let close = find("connection").is_some_and(|v| v.contains("close"));
    let chunked = find("transfer-encoding").is_some_and(|v| v.contains("chunked"));
    let length = find("content-length").and_then(|v| v.parse::<usize>().ok());
    let mut close_delimited = false;
    if !has_no_body(response_to, &start) {
        if chunked {
            read_chunked_body(reader, &mut raw).await?;
        } else if let Some(length) = length {
            let mut body = vec![0u8; length];
            reader.read_exact(&mut body).await?;
            raw.extend_from_slice(&body);
        } else if response_to.is_some() {
            reader.read_to_end(&mut raw).await?;
            close_delimited = true;
        }
    }
    Ok(Some(Message {
        raw,
        start,
        headers,
        close: close || close_delimited,
    }))
}

/// Reads a message's start line and headers into `raw` (stray blank lines before the start line
/// skipped); returns them, or `None` on a clean EOF before the first byte. A head over 256 KiB is
/// an error, so a peer that never ends its head cannot grow the buffer without bound.
async fn read_head<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    raw: &mut Vec<u8>,
) -> std::io::Result<Option<(String, Vec<(String, String)>)>> {
    let mut line = Vec::new();
    let mut start = String::new();
    let mut headers = Vec::new();
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).await?;
        if n == 0 {
            if raw.is_empty() {
                return Ok(None);
            }
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        raw.extend_from_slice(&line);
        if raw.len() > 256 * 1024 {
            return Err(std::io::Error::other("head too large"));
        }
        let text = String::from_utf8_lossy(&line).trim_end().to_owned();
        if start.is_empty() {
            if text.is_empty() {
                raw.clear();
                continue; // stray CRLF between messages
            }
            start = text;
            continue;
        }
        if text.is_empty() {
            break;
        }
        if let Some((k, v)) = text.split_once(':') {
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    Ok(Some((start, headers)))
}

/// Whether a message has no body whatever its headers say: a response to `HEAD`, or a `1xx`,
/// `204` or `304` response (`start` is its status line). A request (`response_to` is `None`)
/// goes by its headers.
fn has_no_body(response_to: Option<&str>, start: &str) -> bool {
    let status = response_to.and_then(|_| {
        start
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
    });
    match (response_to, status) {
        (Some(method), Some(status)) => {
            method == "HEAD" || status / 100 == 1 || status == 204 || status == 304
        }
        _ => false,
    }
}

/// Reads a chunked body into `raw`, as sent: every chunk with its size line, then the last
/// chunk's trailers up to the blank line that ends the message.
async fn read_chunked_body<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    raw: &mut Vec<u8>,
) -> std::io::Result<()> {
    let mut line = Vec::new();
    loop {
        read_raw_line(reader, raw, &mut line).await?;
        let size_text = String::from_utf8_lossy(&line);
        let size_text = size_text.trim().split(';').next().unwrap_or("").to_owned();
        let size = usize::from_str_radix(&size_text, 16)
            .map_err(|_| std::io::Error::other("bad chunk size"))?;
        if size == 0 {
            return read_trailers(reader, raw).await;
        }
        let mut chunk = vec![0u8; size + 2];
        reader.read_exact(&mut chunk).await?;
        raw.extend_from_slice(&chunk);
    }
}

/// Reads the trailers after a chunked body's last chunk into `raw`, up to and including the
/// blank line that ends the message.
async fn read_trailers<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    raw: &mut Vec<u8>,
) -> std::io::Result<()> {
    let mut line = Vec::new();
    loop {
        read_raw_line(reader, raw, &mut line).await?;
        if line == b"\r\n" || line == b"\n" {
            return Ok(());
        }
    }
}

/// Reads one line into `line` and appends it to `raw`, as sent; the end of the stream here is
/// an error (the message was cut).
async fn read_raw_line<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    raw: &mut Vec<u8>,
    line: &mut Vec<u8>,
) -> std::io::Result<()> {
    line.clear();
    if reader.read_until(b'\n', line).await? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    raw.extend_from_slice(line);
    Ok(())
}

/// Which settle call a request path is, if any.
fn settle_kind(method: &str, path: &str) -> Option<&'static str> {
    if method != "POST" {
        return None;
    }
    let path = path.split('?').next().unwrap_or(path);
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        ["v0", "executions", _, "steps", _, "complete"] => Some("step.complete"),
        ["v0", "executions", _, "steps", _, "fail"] => Some("step.fail"),
        ["v0", "executions", _, "complete"] => Some("execution.complete"),
        ["v0", "executions", _, "fail"] => Some("execution.fail"),
        _ => None,
    }
}

/// Starts the proxy of `slot` on an ephemeral port in front of `kernel`; returns its port.
pub(crate) async fn start(
    slot: usize,
    kernel: std::net::SocketAddr,
    ledger: Arc<Ledger>,
    seed: u64,
) -> std::io::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        let mut connection = 0u64;
        loop {
            let Ok((client, _)) = listener.accept().await else {
                continue;
            };
            connection += 1;
            let rng = Rng::derive(seed, 0x1000 + (slot as u64) * 0x1_0000 + connection);
            let ledger = Arc::clone(&ledger);
            tokio::spawn(async move {
                let _ = relay(slot, client, kernel, ledger, rng).await;
            });
        }
    });
    Ok(port)
}

/// What the proxy does to one exchange.
enum Fault {
    None,
    CutRequest(usize),
    CutResponse,
}

/// A request from an agent, with the method and path of its request line.
struct Request {
    message: Message,
    method: String,
    path: String,
}

impl Request {
    /// Reads the method and path from the request line (empty when missing).
    fn new(message: Message) -> Self {
        let mut parts = message.start.split_whitespace();
        let method = parts.next().unwrap_or("").to_owned();
        let path = parts.next().unwrap_or("").to_owned();
        Self {
            message,
            method,
            path,
        }
    }

    /// The execution id of a `/v0/executions/{id}/...` path, for the trace.
    fn execution(&self) -> String {
        self.path
            .trim_start_matches("/v0/executions/")
            .split(['/', '?'])
            .next()
            .unwrap_or("")
            .to_owned()
    }
}

/// Relays one agent connection's exchanges to the kernel, one at a time, each over a fresh
/// kernel connection, with the faults drawn for it; ends when either side closes or a cut ends
/// the connection.
async fn relay(
    slot: usize,
    client: TcpStream,
    kernel: std::net::SocketAddr,
    ledger: Arc<Ledger>,
    mut rng: Rng,
) -> std::io::Result<()> {
    let _ = client.set_nodelay(true);
    let (client_read, mut client_write) = client.into_split();
    let mut client_read = BufReader::new(client_read);
    loop {
        let Some(message) = read_message(&mut client_read, None).await? else {
            return Ok(());
        };
        // A frozen kernel: nothing goes through until the freeze ends.
        ledger.wait_thawed(slot).await;
        let request = Request::new(message);
        let fault = draw_fault(&ledger, &mut rng, &request);
        // A fresh kernel connection per exchange: a kept-alive one the kernel closes while idle
        // would be a cut nobody injected.
        let stream = TcpStream::connect(kernel).await?;
        let _ = stream.set_nodelay(true);
        let (up_read, mut up_write) = stream.into_split();
        let mut up_read = BufReader::new(up_read);
        if let Fault::CutRequest(n) = fault {
            record_request_cut(slot, &ledger, &request);
            let raw = &request.message.raw;
            let n = n.min(raw.len().saturating_sub(1)).max(1);
            let _ = up_write.write_all(&raw[..n]).await;
            let _ = up_write.shutdown().await;
            let _ = client_write.shutdown().await;
            return Ok(());
        }
        let sent_at = Instant::now();
        up_write.write_all(&request.message.raw).await?;
        let Some(response) = read_message(&mut up_read, Some(&request.method)).await? else {
            return Ok(());
        };
        trace_exchange(slot, &ledger, &request, &response, &fault);
        if let Some(kind) = settle_kind(&request.method, &request.path) {
            ledger.record_settle(settle_call(slot, kind, &request, &response, sent_at));
        }
        ledger.wait_thawed(slot).await;
        if let Fault::CutResponse = fault {
            cut_response(&ledger, &mut rng, &request, &response, &mut client_write).await;
            return Ok(());
        }
        client_write.write_all(&response.raw).await?;
        if response.close || request.message.close {
            let _ = client_write.shutdown().await;
            return Ok(());
        }
    }
}

/// Draws the fault of one exchange from the connection's generator: a cut request (after a
/// random number of its bytes), else a cut response, each with the ledger's cut probability;
/// none while faults are off (then nothing is drawn).
fn draw_fault(ledger: &Ledger, rng: &mut Rng, request: &Request) -> Fault {
    if !ledger.faults_on() {
        return Fault::None;
    }
    let p = ledger.cut_probability;
    if rng.chance(p) {
        let len = request.message.raw.len();
        Fault::CutRequest(rng.range(1, len.saturating_sub(1) as u64) as usize)
    } else if rng.chance(p) {
        Fault::CutResponse
    } else {
        Fault::None
    }
}

/// Counts and records a cut request, and traces it under its execution.
fn record_request_cut(slot: usize, ledger: &Ledger, request: &Request) {
    let (method, path) = (&request.method, &request.path);
    ledger.counters.cut_requests.fetch_add(1, Ordering::Relaxed);
    ledger.record_cut(method, path, "request");
    ledger.trace(
        &request.execution(),
        format!("slot {slot} {method} {path} request cut"),
    );
}

/// Traces an agent's `POST` under its execution: the lease it carried, the kernel's status,
/// decision and step id, and whether its response is about to be cut.
fn trace_exchange(
    slot: usize,
    ledger: &Ledger,
    request: &Request,
    response: &Message,
    fault: &Fault,
) {
    let (method, path) = (&request.method, &request.path);
    if method != "POST" || !path.contains("/v0/executions/") {
        return;
    }
    let execution = request.execution();
    let answer: serde_json::Value = serde_json::from_slice(response.body()).unwrap_or_default();
    let message = &request.message;
    ledger.trace(
        &execution,
        format!(
            "slot {slot} {method} {} [{} attempt {}] -> {} {} {}{}",
            path.trim_start_matches("/v0/executions/")
                .trim_start_matches(execution.as_str()),
            crate::webhook::short(message.header("rebuno-dispatch-id").unwrap_or("")),
            message.header("rebuno-dispatch-attempt").unwrap_or(""),
            response.start.split_whitespace().nth(1).unwrap_or(""),
            answer["decision"].as_str().unwrap_or(""),
            answer["step_id"]
                .as_str()
                .map_or("", |s| &s[..s.len().min(8)]),
            if matches!(fault, Fault::CutResponse) {
                " (response cut)"
            } else {
                ""
            }
        ),
    );
}

/// The ledger's record of a settle call of kind `kind`: the lease it carried (dispatch id and
/// attempt headers), when it was sent, and the kernel's status and decision.
fn settle_call(
    slot: usize,
    kind: &'static str,
    request: &Request,
    response: &Message,
    sent_at: Instant,
) -> SettleCall {
    let status = response
        .start
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .unwrap_or(0);
    let decision = serde_json::from_slice::<serde_json::Value>(response.body())
        .ok()
        .and_then(|v| {
            v.get("decision")
                .and_then(|d| d.as_str())
                .map(str::to_owned)
        })
        .unwrap_or_default();
    SettleCall {
        slot,
        kind,
        path: request.path.clone(),
        dispatch_id: request
            .message
            .header("rebuno-dispatch-id")
            .unwrap_or("")
            .to_owned(),
        attempt: request
            .message
            .header("rebuno-dispatch-attempt")
            .and_then(|a| a.parse().ok())
            .unwrap_or(0),
        sent_at,
        status,
        decision,
    }
}

/// Counts and records a cut response, then sends the agent a random prefix of it and closes
/// the connection (the kernel did process the request).
async fn cut_response(
    ledger: &Ledger,
    rng: &mut Rng,
    request: &Request,
    response: &Message,
    client_write: &mut tokio::net::tcp::OwnedWriteHalf,
) {
    ledger
        .counters
        .cut_responses
        .fetch_add(1, Ordering::Relaxed);
    ledger.record_cut(&request.method, &request.path, "response");
    let n = rng.range(1, response.raw.len().saturating_sub(1) as u64) as usize;
    let _ = client_write
        .write_all(&response.raw[..n.min(response.raw.len())])
        .await;
    let _ = client_write.shutdown().await;
}
