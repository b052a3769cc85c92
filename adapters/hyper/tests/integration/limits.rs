//! Each connection limit, and what a client sees when it hits it.

use crate::common;

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

fn get_with_headers(headers: &str) -> Vec<u8> {
    format!("GET /healthz HTTP/1.1\r\nhost: agent\r\n{headers}\r\n").into_bytes()
}

#[tokio::test]
async fn a_request_head_over_16_kib_gets_431() {
    let addr = common::start(|serve| serve).await;
    let big = format!("x-big: {}\r\n", "a".repeat(20 * 1024));
    let answer = common::exchange(addr, &get_with_headers(&big)).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");

    let fits = format!("x-big: {}\r\n", "a".repeat(12 * 1024));
    let answer = common::exchange(addr, &get_with_headers(&fits)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
}

#[tokio::test]
async fn the_head_limit_does_not_bound_the_body() {
    let addr = common::start(|serve| serve).await;
    let body = "x".repeat(40 * 1024);
    let request = format!(
        "POST /webhook HTTP/1.1\r\nhost: agent\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let answer = common::exchange(addr, request.as_bytes()).await;
    assert!(
        answer.starts_with("HTTP/1.1 401"),
        "a 40 KiB body reaches the agent, which refuses it unsigned: {answer:?}"
    );
}

#[tokio::test]
async fn a_head_limit_below_hypers_minimum_counts_as_8_kib_instead_of_panicking() {
    let addr = common::start(|serve| serve.max_header_bytes(0)).await;
    let answer = common::exchange(addr, &get_with_headers("")).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    let big = format!("x-big: {}\r\n", "a".repeat(9 * 1024));
    let answer = common::exchange(addr, &get_with_headers(&big)).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");
}

#[tokio::test]
async fn more_than_64_headers_get_431() {
    let addr = common::start(|serve| serve).await;
    let headers = |n: usize| (0..n).map(|i| format!("x-h{i}: v\r\n")).collect::<String>();
    let answer = common::exchange(addr, &get_with_headers(&headers(80))).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");
    let answer = common::exchange(addr, &get_with_headers(&headers(60))).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");

    let addr = common::start(|serve| serve.max_headers(4)).await;
    let answer = common::exchange(addr, &get_with_headers(&headers(5))).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");
}

#[tokio::test]
async fn an_http2_header_block_over_16_kib_gets_431() {
    let addr = common::start(|serve| serve).await;
    let (mut send, _connection) = common::h2_client(addr).await;
    let mut request = common::h2_get(addr, "/healthz");
    request.headers_mut().insert(
        "x-big",
        http::HeaderValue::from_str(&"a".repeat(20 * 1024)).unwrap(),
    );
    let refused = send.send_request(request).await.expect("an answer");
    assert_eq!(refused.status(), 431);
    // Refused per stream: the connection keeps serving.
    let fine = send
        .send_request(common::h2_get(addr, "/healthz"))
        .await
        .expect("an answer");
    assert_eq!(fine.status(), 200);
}

#[tokio::test]
async fn a_head_that_trickles_in_is_cut_at_the_header_read_timeout() {
    let addr = common::start(|serve| {
        serve
            .idle_timeout(Duration::from_millis(300))
            .header_read_timeout(Duration::from_secs(1))
    })
    .await;
    // An HTTP/1 head, and the HTTP/2 preface, a byte every 100 ms: never idle, never whole.
    let h1 = (&b"GET /healthz HTTP/1.1\r\n"[..], &[b'x'; 40][..]);
    let h2 = (&b""[..], &b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..]);
    for (start, trickle) in [h1, h2] {
        let mut connection = TcpStream::connect(addr).await.expect("connect");
        connection.write_all(start).await.expect("start");
        let started = tokio::time::Instant::now();
        for byte in trickle {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if connection.write_all(&[*byte]).await.is_err() {
                break;
            }
        }
        let closed = common::closed_within(&mut connection, Duration::from_millis(100))
            .await
            .map(|_| started.elapsed())
            .expect("the server closed the trickling connection");
        assert!(
            closed >= Duration::from_millis(900) && closed < Duration::from_secs(2),
            "{:?} closed after {closed:?}",
            String::from_utf8_lossy(trickle)
        );
    }
}

#[tokio::test]
async fn connections_over_the_limit_wait_in_the_backlog_until_a_slot_frees() {
    let addr = common::start(|serve| {
        serve
            .max_connections(2)
            .idle_timeout(None)
            .header_read_timeout(None)
    })
    .await;
    let first = TcpStream::connect(addr).await.expect("first");
    let _second = TcpStream::connect(addr).await.expect("second");
    // Let the server take both before the third arrives.
    tokio::time::sleep(Duration::from_millis(100)).await;

    let mut third = TcpStream::connect(addr)
        .await
        .expect("the third connects: it waits in the backlog, not refused");
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: agent\r\n\r\n")
        .await
        .expect("request");
    assert_eq!(
        common::closed_within(&mut third, Duration::from_millis(500)).await,
        None,
        "the third waits unanswered and open"
    );

    drop(first);
    let answer = common::read_answer(&mut third).await;
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "served once a slot freed: {answer:?}"
    );
}
