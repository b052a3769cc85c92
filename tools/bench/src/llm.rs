//! The `llm` workload's provider: a tiny OpenAI-style chat-completions stub that answers every
//! request at once with the same small JSON. It runs inside the kernel process (on loopback), so
//! the agent process's CPU time is the agent's alone, and it counts its requests so a replayed
//! run can be checked to have reached no provider.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Result;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

/// The answer to every request: a non-streamed chat completion.
const ANSWER: &[u8] = br#"{"id":"chatcmpl-bench","object":"chat.completion","created":0,"model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}"#;

/// A running stub provider.
#[derive(Debug, Clone)]
pub(crate) struct Stub {
    /// Its chat-completions URL.
    pub(crate) url: String,
    calls: Arc<AtomicUsize>,
}

impl Stub {
    /// Requests answered so far.
    pub(crate) fn calls(&self) -> usize {
        self.calls.load(Ordering::Relaxed)
    }
}

/// Starts the stub on an ephemeral loopback port.
pub(crate) async fn stub() -> Result<Stub> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/v1/chat/completions", listener.local_addr()?);
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| answer(request, counter.clone()));
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(Stub { url, calls })
}

/// Reads the request body (as a provider would) and answers [`ANSWER`].
async fn answer(
    request: hyper::Request<Incoming>,
    calls: Arc<AtomicUsize>,
) -> Result<hyper::Response<Full<Bytes>>, Infallible> {
    let _ = request.into_body().collect().await;
    calls.fetch_add(1, Ordering::Relaxed);
    let mut response = hyper::Response::new(Full::new(Bytes::from_static(ANSWER)));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}
