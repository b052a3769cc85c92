//! An agent served like a serverless host: the first invocation may carry a [`Deadline`], and
//! every webhook received is kept so a test can deliver it again.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rebuno::Agent;
use rebuno::rt::{Clock, Deadline, SystemClock};

/// A webhook as received: its body and `Rebuno-Signature`.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub body: Bytes,
    pub signature: String,
}

/// The served host.
pub struct Host {
    pub url: String,
    deliveries: Arc<Mutex<Vec<Delivery>>>,
}

impl Host {
    /// Every webhook received so far, in order.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.deliveries.lock().unwrap().clone()
    }

    /// POSTs `delivery` again, byte for byte, and returns the status.
    pub async fn deliver_again(&self, delivery: &Delivery) -> u16 {
        reqwest::Client::new()
            .post(&self.url)
            .header("Rebuno-Signature", &delivery.signature)
            .body(delivery.body.clone())
            .send()
            .await
            .expect("POST webhook")
            .status()
            .as_u16()
    }
}

/// Serves `agent`; the first invocation may only run for `first_budget` (none when `None`).
pub async fn serve_as_host(agent: Agent, first_budget: Option<Duration>) -> Host {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/webhook", listener.local_addr().unwrap());
    let deliveries = Arc::new(Mutex::new(Vec::new()));
    let recorded = Arc::clone(&deliveries);
    let invocations = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let (agent, invocations) = (agent.clone(), Arc::clone(&invocations));
            let recorded = Arc::clone(&recorded);
            let service =
                hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let (agent, recorded) = (agent.clone(), Arc::clone(&recorded));
                    let first = invocations.fetch_add(1, Ordering::SeqCst) == 0;
                    async move {
                        let (mut parts, body) = request.into_parts();
                        let body = body.collect().await.unwrap().to_bytes();
                        let signature = parts
                            .headers
                            .get("Rebuno-Signature")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned();
                        recorded.lock().unwrap().push(Delivery {
                            body: body.clone(),
                            signature,
                        });
                        if let (true, Some(budget)) = (first, first_budget) {
                            let budget = u64::try_from(budget.as_millis()).unwrap();
                            let deadline = Deadline::at_unix_millis(
                                SystemClock::default().unix_millis() + budget,
                            )
                            .margin(Duration::from_millis(100));
                            parts.extensions.insert(deadline);
                        }
                        let request = http::Request::from_parts(parts, rebuno::Body::from(body));
                        Ok::<_, Infallible>(agent.fetch(request).await)
                    }
                });
            tokio::spawn(async move {
                auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await
            });
        }
    });
    Host { url, deliveries }
}
