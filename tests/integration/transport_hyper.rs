//! `HyperTransport`, the default transport on native targets, against raw sockets that
//! misbehave: refused connections, silence, a stalled stream, plain text on an https port.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt as _;
use rebuno::transport::{HyperTransport, Transport, TransportErrorKind};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

fn get(url: &str) -> http::Request<Bytes> {
    http::Request::get(url)
        .body(Bytes::new())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A one-connection server that reads the request head and then runs `answer` on the socket.
async fn server<F, Fut>(answer: F) -> String
where
    F: FnOnce(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut buffer = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match socket.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buffer[..n]),
            }
        }
        answer(socket).await;
    });
    format!("http://{address}")
}

#[tokio::test]
async fn a_refused_connection_is_a_connect_error() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let transport = HyperTransport::new().unwrap();
    let error = transport
        .send(
            get(&format!("http://127.0.0.1:{port}/v0/x")),
            Duration::from_secs(5),
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), TransportErrorKind::Connect, "{error:?}");
}

#[tokio::test]
async fn a_silent_server_times_out() {
    let url = server(|socket| async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(socket);
    })
    .await;
    let transport = HyperTransport::new().unwrap();
    let started = Instant::now();
    let error = transport
        .send(get(&format!("{url}/v0/x")), Duration::from_millis(200))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), TransportErrorKind::Timeout, "{error:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_whole_response_keeps_its_status_headers_and_body() {
    let url = server(|mut socket| async move {
        let answer = b"HTTP/1.1 409 Conflict\r\ncontent-type: application/json\r\nx-extra: 1\r\ncontent-length: 13\r\n\r\n{\"code\":\"x\"}\n";
        socket.write_all(answer).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    })
    .await;
    let transport = HyperTransport::new().unwrap();
    let response = transport
        .send(get(&format!("{url}/v0/x")), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(response.status(), http::StatusCode::CONFLICT);
    assert_eq!(response.headers()["x-extra"], "1");
    assert_eq!(response.body().as_ref(), b"{\"code\":\"x\"}\n");
}

#[tokio::test]
async fn a_stalled_stream_yields_what_came_then_a_timeout() {
    let url = server(|mut socket| async move {
        let head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        socket.write_all(head).await.unwrap();
        socket.write_all(b"6\r\ndata:1\r\n").await.unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
    })
    .await;
    let transport = HyperTransport::new().unwrap();
    let response = transport
        .send_streaming(get(&format!("{url}/v0/s")), Duration::from_millis(300))
        .await
        .unwrap();
    let mut body = response.into_body();
    let first = body.next().await.unwrap().unwrap();
    assert_eq!(first.as_ref(), b"data:1");
    let error = body.next().await.unwrap().unwrap_err();
    assert_eq!(error.to_string(), "request timed out");
    assert!(
        body.next().await.is_none(),
        "the stream ends after the timeout"
    );
}

#[tokio::test]
async fn https_to_a_plain_text_port_fails_as_a_connect_error() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let _ = socket
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            .await;
        tokio::time::sleep(Duration::from_secs(5)).await;
    });
    let transport = HyperTransport::new().unwrap();
    let error = transport
        .send(
            get(&format!("https://{address}/v0/x")),
            Duration::from_secs(5),
        )
        .await
        .unwrap_err();
    // The TLS handshake fails before any request is written: the kernel never saw it.
    assert_eq!(error.kind(), TransportErrorKind::Connect, "{error:?}");
}

#[tokio::test]
async fn past_its_limit_a_request_waits_for_a_permit_and_gives_up_unsent() {
    // One permit, held by a request the server never answers.
    let url = server(|socket| async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(socket);
    })
    .await;
    let transport = HyperTransport::with_max_in_flight(1).unwrap();
    let holder = transport.send(get(&format!("{url}/v0/held")), Duration::from_secs(10));
    let holder = tokio::spawn(holder);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let error = transport
        .send(get(&format!("{url}/v0/queued")), Duration::from_millis(200))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), TransportErrorKind::Connect, "{error:?}");
    assert!(started.elapsed() >= Duration::from_millis(150));
    holder.abort();
}

#[tokio::test]
async fn a_burst_past_the_limit_completes_over_the_pooled_connections() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::spawn(answer_forever(socket));
        }
    });
    let transport = HyperTransport::with_max_in_flight(4).unwrap();
    let burst = (0..200).map(|i| {
        transport.send(
            get(&format!("http://{address}/v0/{i}")),
            Duration::from_secs(10),
        )
    });
    for response in futures_util::future::join_all(burst).await {
        assert_eq!(response.unwrap().status(), http::StatusCode::OK);
    }
    let connections = accepted.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        connections <= 4,
        "{connections} connections for 200 requests"
    );
}

/// Answers every request on `socket` with an empty `200`, keeping the connection.
async fn answer_forever(mut socket: tokio::net::TcpStream) {
    let mut pending = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            pending.drain(..end + 4);
            let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
            if socket.write_all(ok).await.is_err() {
                return;
            }
        }
        match socket.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => pending.extend_from_slice(&buffer[..n]),
        }
    }
}
