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
    let find = |name: &str| {
        headers
            .iter()
            .find(|(k, _): &&(String, String)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.to_ascii_lowercase())
    };
    let close = find("connection").is_some_and(|v| v.contains("close"));
    let chunked = find("transfer-encoding").is_some_and(|v| v.contains("chunked"));
    let length = find("content-length").and_then(|v| v.parse::<usize>().ok());
    let status = response_to.and_then(|_| {
        start
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
    });
    let no_body = match (response_to, status) {
        (Some(method), Some(status)) => {
            method == "HEAD" || status / 100 == 1 || status == 204 || status == 304
        }
        _ => false,
    };
    let mut close_delimited = false;
    if !no_body {
        if chunked {
            loop {
                line.clear();
                if reader.read_until(b'\n', &mut line).await? == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                raw.extend_from_slice(&line);
                let size_text = String::from_utf8_lossy(&line);
                let size_text = size_text.trim().split(';').next().unwrap_or("").to_owned();
                let size = usize::from_str_radix(&size_text, 16)
                    .map_err(|_| std::io::Error::other("bad chunk size"))?;
                if size == 0 {
                    loop {
                        line.clear();
                        if reader.read_until(b'\n', &mut line).await? == 0 {
                            return Err(std::io::ErrorKind::UnexpectedEof.into());
                        }
                        raw.extend_from_slice(&line);
                        if line == b"\r\n" || line == b"\n" {
                            break;
                        }
                    }
                    break;
                }
                let mut chunk = vec![0u8; size + 2];
                reader.read_exact(&mut chunk).await?;
                raw.extend_from_slice(&chunk);
            }
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
        let Some(request) = read_message(&mut client_read, None).await? else {
            return Ok(());
        };
        // A frozen kernel: nothing goes through until the freeze ends.
        ledger.wait_thawed(slot).await;
        let mut parts = request.start.split_whitespace();
        let method = parts.next().unwrap_or("").to_owned();
        let path = parts.next().unwrap_or("").to_owned();
        let fault = if ledger.faults_on() {
            let p = ledger.cut_probability;
            if rng.chance(p) {
                Fault::CutRequest(rng.range(1, request.raw.len().saturating_sub(1) as u64) as usize)
            } else if rng.chance(p) {
                Fault::CutResponse
            } else {
                Fault::None
            }
        } else {
            Fault::None
        };
        // A fresh kernel connection per exchange: a kept-alive one the kernel closes while idle
        // would be a cut nobody injected.
        let stream = TcpStream::connect(kernel).await?;
        let _ = stream.set_nodelay(true);
        let (up_read, mut up_write) = stream.into_split();
        let mut up_read = BufReader::new(up_read);
        let (up_read, up_write) = (&mut up_read, &mut up_write);
        if let Fault::CutRequest(n) = fault {
            ledger.counters.cut_requests.fetch_add(1, Ordering::Relaxed);
            ledger.record_cut(&method, &path, "request");
            let execution = path
                .trim_start_matches("/v0/executions/")
                .split(['/', '?'])
                .next()
                .unwrap_or("")
                .to_owned();
            ledger.trace(
                &execution,
                format!("slot {slot} {method} {path} request cut"),
            );
            let n = n.min(request.raw.len().saturating_sub(1)).max(1);
            let _ = up_write.write_all(&request.raw[..n]).await;
            let _ = up_write.shutdown().await;
            let _ = client_write.shutdown().await;
            return Ok(());
        }
        let sent_at = Instant::now();
        up_write.write_all(&request.raw).await?;
        let Some(response) = read_message(up_read, Some(&method)).await? else {
            return Ok(());
        };
        let execution = path
            .trim_start_matches("/v0/executions/")
            .split(['/', '?'])
            .next()
            .unwrap_or("")
            .to_owned();
        if method == "POST" && path.contains("/v0/executions/") {
            let answer: serde_json::Value =
                serde_json::from_slice(response.body()).unwrap_or_default();
            ledger.trace(
                &execution,
                format!(
                    "slot {slot} {method} {} [{} attempt {}] -> {} {} {}{}",
                    path.trim_start_matches("/v0/executions/")
                        .trim_start_matches(execution.as_str()),
                    crate::webhook::short(request.header("rebuno-dispatch-id").unwrap_or("")),
                    request.header("rebuno-dispatch-attempt").unwrap_or(""),
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
        if let Some(kind) = settle_kind(&method, &path) {
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
            let call = SettleCall {
                slot,
                kind,
                path: path.clone(),
                dispatch_id: request
                    .header("rebuno-dispatch-id")
                    .unwrap_or("")
                    .to_owned(),
                attempt: request
                    .header("rebuno-dispatch-attempt")
                    .and_then(|a| a.parse().ok())
                    .unwrap_or(0),
                sent_at,
                status,
                decision,
            };
            ledger.record_settle(call);
        }
        ledger.wait_thawed(slot).await;
        if let Fault::CutResponse = fault {
            ledger
                .counters
                .cut_responses
                .fetch_add(1, Ordering::Relaxed);
            ledger.record_cut(&method, &path, "response");
            let n = rng.range(1, response.raw.len().saturating_sub(1) as u64) as usize;
            let _ = client_write
                .write_all(&response.raw[..n.min(response.raw.len())])
                .await;
            let _ = client_write.shutdown().await;
            return Ok(());
        }
        client_write.write_all(&response.raw).await?;
        if response.close || request.close {
            let _ = client_write.shutdown().await;
            return Ok(());
        }
    }
}
