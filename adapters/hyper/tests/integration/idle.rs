//! Idle connections, HTTP/1 or HTTP/2, are closed after the idle timeout; busy ones are not.

use crate::common;

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const IDLE: Duration = Duration::from_millis(300);

#[tokio::test]
async fn a_connection_that_never_sends_anything_is_closed() {
    let addr = common::start(|serve| serve.idle_timeout(IDLE)).await;
    let mut connection = TcpStream::connect(addr).await.expect("connect");

    let closed = common::closed_within(&mut connection, Duration::from_secs(5))
        .await
        .expect("the server closed the silent connection");
    assert!(
        closed >= Duration::from_millis(250) && closed < Duration::from_secs(2),
        "closed after {closed:?}, the idle timeout is {IDLE:?}"
    );
}

#[tokio::test]
async fn an_idle_http2_connection_is_closed() {
    let addr = common::start(|serve| serve.idle_timeout(IDLE)).await;
    let (mut send, connection) = common::h2_client(addr).await;
    let response = send
        .send_request(common::h2_get(addr, "/healthz"))
        .await
        .expect("h2 response");
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), http::Version::HTTP_2);
    drop(response);
    let answered = tokio::time::Instant::now();

    let ended = tokio::time::timeout(Duration::from_secs(5), connection)
        .await
        .expect("the server closed the idle h2 connection");
    ended.expect("join").expect("a clean GOAWAY close");
    let idle = answered.elapsed();
    assert!(
        idle >= Duration::from_millis(250) && idle < Duration::from_secs(3),
        "closed after {idle:?} idle, the idle timeout is {IDLE:?}"
    );
    assert!(send.ready().await.is_err(), "no more requests after GOAWAY");
}

#[tokio::test]
async fn a_request_in_progress_is_not_cut_by_the_idle_timeout() {
    let addr = common::start(|serve| serve.idle_timeout(IDLE)).await;
    let mut connection = TcpStream::connect(addr).await.expect("connect");
    // The head now, the body (which the agent waits for) after three idle timeouts of silence.
    connection
        .write_all(b"POST /webhook HTTP/1.1\r\nhost: agent\r\ncontent-length: 2\r\n\r\n")
        .await
        .expect("head");
    assert_eq!(
        common::closed_within(&mut connection, 3 * IDLE).await,
        None,
        "the server closed a connection with a request in flight"
    );
    connection.write_all(b"{}").await.expect("body");

    let answer = common::read_answer(&mut connection).await;
    assert!(
        answer.starts_with("HTTP/1.1 401"),
        "the unsigned webhook is answered: {answer:?}"
    );
}
