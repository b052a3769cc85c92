//! Shutdown closes idle connections at once and lets requests in progress finish first.

use crate::common;

use std::future::IntoFuture;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

#[tokio::test]
async fn shutdown_closes_idle_connections_and_finishes_requests_in_progress() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    // No idle or head timeouts: only shutdown closes these connections.
    let server = tokio::spawn(
        rebuno_hyper::serve(listener, common::agent())
            .idle_timeout(None)
            .header_read_timeout(None)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .into_future(),
    );
    let mut idle = TcpStream::connect(addr).await.expect("connect");
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: agent\r\n\r\n")
        .await
        .expect("request");
    assert!(
        common::read_answer(&mut idle)
            .await
            .starts_with("HTTP/1.1 200")
    );
    let mut silent = TcpStream::connect(addr).await.expect("connect");
    let mut busy = TcpStream::connect(addr).await.expect("connect");
    busy.write_all(b"POST /webhook HTTP/1.1\r\nhost: agent\r\ncontent-length: 2\r\n\r\n")
        .await
        .expect("head");
    tokio::time::sleep(Duration::from_millis(100)).await;

    stop.send(()).expect("signal");
    let limit = Duration::from_secs(2);
    assert!(
        common::closed_within(&mut idle, limit).await.is_some(),
        "kept-alive closed"
    );
    assert!(
        common::closed_within(&mut silent, limit).await.is_some(),
        "silent closed"
    );
    assert!(
        !server.is_finished(),
        "the server waits for the request in progress"
    );

    busy.write_all(b"{}").await.expect("body");
    let answer = common::read_answer(&mut busy).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer:?}");
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the server stopped once the last connection closed")
        .expect("join")
        .expect("serve");
}
