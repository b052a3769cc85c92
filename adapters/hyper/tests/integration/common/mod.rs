//! Helpers shared by the server tests: a kernel-less agent, a running server, raw HTTP/1 and
//! HTTP/2 clients.

#![allow(dead_code, unreachable_pub)]

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rebuno::Agent;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An agent whose kernel is unreachable: enough for `/healthz`, 404s and refused webhooks.
pub fn agent() -> Agent {
    Agent::builder("limits")
        .secret("s3cret")
        .base_url("http://127.0.0.1:1")
        .handler(|_: serde_json::Value| async { Ok::<_, rebuno::HandlerError>(()) })
        .build()
        .expect("agent")
}

/// Serves [`agent`] with `configure` applied, on a task; returns its address.
pub async fn start(
    configure: impl FnOnce(rebuno_hyper::Serve) -> rebuno_hyper::Serve,
) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(configure(rebuno_hyper::serve(listener, agent())).into_future());
    addr
}

/// Waits up to `limit` for the server to close `connection`: `Some(elapsed)` once a read
/// returns EOF or an error, `None` if it is still open (bytes read are skipped).
pub async fn closed_within(connection: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let started = tokio::time::Instant::now();
    let mut sink = [0; 4096];
    loop {
        let read = tokio::time::timeout_at(started + limit, connection.read(&mut sink)).await;
        match read {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

/// Sends `request` (a whole HTTP/1 request) and returns what the server answers before it
/// closes or goes quiet for 2 s.
pub async fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut connection = TcpStream::connect(addr).await.expect("connect");
    connection.write_all(request).await.expect("request");
    read_answer(&mut connection).await
}

/// Reads one answer: up to the end of the head and as much body as arrives within 200 ms.
pub async fn read_answer(connection: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let mut buf = [0; 4096];
    let mut limit = Duration::from_secs(2);
    while let Ok(Ok(n)) = tokio::time::timeout(limit, connection.read(&mut buf)).await {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
        if answer.windows(4).any(|w| w == b"\r\n\r\n") {
            limit = Duration::from_millis(200);
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

/// An HTTP/2 (prior knowledge) client connection; the connection's task is returned so tests
/// can watch it end.
pub async fn h2_client(
    addr: SocketAddr,
) -> (
    hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
    tokio::task::JoinHandle<Result<(), hyper::Error>>,
) {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (send, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("h2 handshake");
    (send, tokio::spawn(connection))
}

/// A GET of `path` for an HTTP/2 client.
pub fn h2_get(addr: SocketAddr, path: &str) -> http::Request<Empty<Bytes>> {
    http::Request::get(format!("http://{addr}{path}"))
        .body(Empty::new())
        .expect("request")
}
