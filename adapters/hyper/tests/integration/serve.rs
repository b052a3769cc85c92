//! rebuno-hyper routes the webhook and drains acknowledged runs on graceful shutdown.

use rebuno::wire::ExecutionStatus;
use std::future::IntoFuture;
use std::time::Duration;

use rebuno::{Agent, HandlerError};
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::{Value, json};
use tokio::net::TcpListener;

#[tokio::test]
async fn shutdown_waits_for_acknowledged_runs_to_finish() {
    let kernel = DevKernel::start().await.expect("kernel");
    let agent = Agent::builder("sleepy")
        .secret("s3cret")
        .base_url(kernel.url())
        .handler(|_: Value| async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok::<_, HandlerError>("rested")
        })
        .build()
        .expect("agent");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        rebuno_hyper::serve(listener, agent)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .into_future(),
    );
    kernel
        .register_agent(AgentSpec::new(
            "sleepy",
            format!("http://{addr}/webhook"),
            "s3cret",
        ))
        .expect("register");
    let created = kernel
        .create_execution(NewExecution::new("sleepy", json!({})))
        .await
        .expect("create");
    kernel
        .wait_until(&created.id, Duration::from_secs(5), |_| true)
        .await
        .expect("exists");
    for _ in 0..200 {
        if kernel
            .events(&created.id)
            .iter()
            .any(|e| e.kind == "dispatch.acked")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    stop.send(()).expect("signal");
    server.await.expect("join").expect("serve");

    let after = kernel.execution(&created.id).expect("execution");
    assert_eq!(
        after.status,
        ExecutionStatus::Completed,
        "shutdown returned before the run finished"
    );
    assert_eq!(after.output, Some(json!("rested")));
}

#[tokio::test]
async fn only_the_webhook_path_and_health_are_served() {
    let kernel = DevKernel::start().await.expect("kernel");
    let agent = Agent::builder("router")
        .secret("s")
        .base_url(kernel.url())
        .webhook_path("/hooks/rebuno")
        .handler(|_: Value| async { Ok::<_, HandlerError>(()) })
        .build()
        .expect("agent");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(rebuno_hyper::serve(listener, agent).into_future());
    let client = reqwest::Client::new();

    assert_eq!(
        client
            .get(format!("{base}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        client
            .post(format!("{base}/webhook"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        client
            .post(format!("{base}/hooks/rebuno"))
            .body("{}")
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(
        client
            .get(format!("{base}/hooks/rebuno"))
            .send()
            .await
            .unwrap()
            .status(),
        405
    );
}

#[tokio::test]
async fn idle_keep_alive_connections_are_closed_after_the_idle_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let agent = Agent::builder("idle")
        .secret("s3cret")
        .base_url("http://127.0.0.1:9")
        .handler(|_: Value| async { Ok::<_, HandlerError>(()) })
        .build()
        .expect("agent");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = rebuno_hyper::serve(listener, agent).idle_timeout(Duration::from_millis(300));
    tokio::spawn(server.into_future());

    let mut connection = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut answer = vec![0; 1024];
    // Two requests on one connection, the second after a pause shorter than the timeout: the
    // connection is kept alive while it is in use.
    for pause in [Duration::ZERO, Duration::from_millis(100)] {
        tokio::time::sleep(pause).await;
        connection
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: agent\r\n\r\n")
            .await
            .expect("request");
        let n = connection.read(&mut answer).await.expect("response");
        assert!(
            answer[..n].starts_with(b"HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&answer[..n])
        );
    }
    let answered = std::time::Instant::now();

    // Then closed by the server once idle for longer than the timeout, and not before it.
    let closed = tokio::time::timeout(Duration::from_secs(5), connection.read(&mut answer))
        .await
        .expect("the server closed the idle connection in time");
    assert_eq!(closed.expect("read"), 0, "EOF from the server");
    let idle = answered.elapsed();
    assert!(
        idle >= Duration::from_millis(250),
        "closed after {idle:?} idle, before the 300 ms timeout"
    );
}
