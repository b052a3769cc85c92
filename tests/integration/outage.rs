//! A kernel outage shorter than the lease: the run's heartbeats reach the kernel when it is back,
//! before the lease runs out, so the run keeps its dispatch and the execution completes on it.
//!
//! The agent talks to the kernel through a TCP proxy that can go down: every connection through
//! it is cut and new ones are closed at once, as when the kernel is killed and restarted.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::lease::gated_by;
use crate::support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rebuno::Agent;
use rebuno::wire::ExecutionStatus;
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::json;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

/// A loopback TCP proxy to `upstream` that can be taken down, and that tells when a heartbeat
/// request passes through it.
struct Proxy {
    addr: SocketAddr,
    up: watch::Sender<bool>,
    heartbeat: Arc<Notify>,
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (up, watching) = watch::channel(true);
        let heartbeat = Arc::new(Notify::new());
        let seen = Arc::clone(&heartbeat);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if !*watching.borrow() {
                    continue; // dropped: closed at once
                }
                let watching = watching.clone();
                tokio::spawn(relay(client, upstream, watching, Arc::clone(&seen)));
            }
        });
        Self {
            addr,
            up,
            heartbeat,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Relays one connection until either side closes or the proxy goes down.
async fn relay(
    client: TcpStream,
    upstream: SocketAddr,
    mut up: watch::Receiver<bool>,
    seen: Arc<Notify>,
) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let requests = async {
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            let n = client_read.read(&mut buffer).await.unwrap_or(0);
            if n == 0 || server_write.write_all(&buffer[..n]).await.is_err() {
                return;
            }
            if buffer[..n].windows(10).any(|w| w == b"/heartbeat") {
                seen.notify_waiters();
            }
        }
    };
    let answers = tokio::io::copy(&mut server_read, &mut client_write);
    tokio::select! {
        () = requests => {}
        _ = answers => {}
        _ = up.wait_for(|up| !*up) => {}
    }
}

#[tokio::test]
async fn a_run_keeps_its_lease_through_a_kernel_outage_shorter_than_the_lease() {
    let _trace = trace_init();
    // A 9 s lease: heartbeats every 3 s, their retries at most 1 s apart.
    let kernel = DevKernel::builder()
        .default_lease_timeout(Duration::from_secs(9))
        .start()
        .await
        .expect("kernel");
    let upstream = kernel
        .url()
        .trim_start_matches("http://")
        .parse()
        .expect("kernel address");
    let proxy = Proxy::start(upstream).await;
    let afters = Arc::new(AtomicUsize::new(0));
    let (open, gate) = watch::channel(false);
    let builder = Agent::builder("outage")
        .secret(SECRET)
        .base_url(proxy.url());
    let served = serve(gated_by(builder, gate, Arc::clone(&afters))).await;
    kernel
        .register_agent(AgentSpec::new("outage", served.webhook_url(), SECRET))
        .expect("register");
    let created = kernel
        .create_execution(NewExecution::new("outage", json!({})))
        .await
        .expect("create");

    // Down for 7 s from just after a heartbeat: the lease (renewed by that heartbeat) lasts 2 s
    // more. The next heartbeat fails 3 s in; retries that wait 2 s and then 4 s (the kernel
    // requests' general backoff) would try at 6.75 s and next at 10.75 s, after the lease.
    let heartbeat = proxy.heartbeat.notified();
    tokio::time::timeout(Duration::from_secs(10), heartbeat)
        .await
        .expect("a heartbeat within 10 s");
    tokio::time::sleep(Duration::from_millis(50)).await; // its answer passes
    proxy.up.send_replace(false);
    tokio::time::sleep(Duration::from_secs(7)).await;
    proxy.up.send_replace(true);
    // Back in time: a heartbeat passes before the lease would have run out.
    tokio::time::timeout(Duration::from_millis(1_800), proxy.heartbeat.notified())
        .await
        .expect("a heartbeat within 1.8 s of the kernel coming back");
    open.send_replace(true);

    let done = kernel
        .wait_terminal(&created.id, WAIT)
        .await
        .expect("the execution ends");
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    let kinds = types(&kernel.events(&created.id));
    let count = |kind: &str| kinds.iter().filter(|k| *k == kind).count();
    assert_eq!(count("dispatch.reclaimed"), 0, "{kinds:?}");
    assert_eq!(
        count("dispatch.acked"),
        1,
        "one dispatch throughout: {kinds:?}"
    );
    assert_eq!(afters.load(Ordering::SeqCst), 1);
    served.shutdown().await;
}
