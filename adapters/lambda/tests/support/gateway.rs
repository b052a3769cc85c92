//! A loopback stand-in for a Function URL: every HTTP request becomes a simulator invocation
//! (a payload-2.0 event with the same method, path, headers and body), and the invocation's
//! response becomes the HTTP response. The dev kernel's webhook URL points here.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::events;
use super::harness::Lambda;

/// One webhook that went through the gateway.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub request_id: String,
    pub status: u16,
    pub body: String,
    /// When the gateway got the webhook.
    pub received: Instant,
    /// From enqueueing the invocation to the function's response.
    pub ack_latency: Duration,
    /// When the gateway had the function's response.
    pub answered: Instant,
}

/// The running gateway.
pub struct Gateway {
    pub addr: SocketAddr,
    deliveries: Arc<Mutex<Vec<Delivery>>>,
    accept: JoinHandle<()>,
}

impl Gateway {
    /// Serves on `127.0.0.1:0`, invoking the function in `lambda`.
    pub async fn start(lambda: Arc<Lambda>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let deliveries = Arc::new(Mutex::new(Vec::new()));
        let accept = tokio::spawn(accept_loop(listener, lambda, Arc::clone(&deliveries)));
        Self {
            addr,
            deliveries,
            accept,
        }
    }

    /// The URL to register as the agent's webhook.
    pub fn webhook_url(&self) -> String {
        format!("http://{}/webhook", self.addr)
    }

    /// Waits for the `n`th delivery (1-based).
    pub async fn delivery(&self, n: usize, timeout: Duration) -> Delivery {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(delivery) = self.deliveries.lock().unwrap().get(n - 1).cloned() {
                return delivery;
            }
            assert!(
                Instant::now() < deadline,
                "no delivery #{n} within {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Every delivery so far.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.deliveries.lock().unwrap().clone()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    lambda: Arc<Lambda>,
    deliveries: Arc<Mutex<Vec<Delivery>>>,
) {
    while let Ok((stream, _)) = listener.accept().await {
        let lambda = Arc::clone(&lambda);
        let deliveries = Arc::clone(&deliveries);
        let service = service_fn(move |request| {
            forward(Arc::clone(&lambda), Arc::clone(&deliveries), request)
        });
        tokio::spawn(async move {
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn forward(
    lambda: Arc<Lambda>,
    deliveries: Arc<Mutex<Vec<Delivery>>>,
    request: http::Request<Incoming>,
) -> Result<http::Response<Full<Bytes>>, Infallible> {
    let received = Instant::now();
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let event = events::function_url(
        parts.method.as_str(),
        parts.uri.path(),
        &parts.headers,
        &body,
    );
    let invoked = lambda.invoke(event).await;
    let status = if invoked.failed { 502 } else { invoked.status };
    deliveries.lock().unwrap().push(Delivery {
        request_id: invoked.request_id,
        status,
        body: invoked.body.clone(),
        received,
        ack_latency: invoked.latency,
        answered: invoked.answered,
    });
    let mut response = http::Response::new(Full::new(Bytes::from(invoked.body)));
    *response.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_GATEWAY);
    Ok(response)
}
