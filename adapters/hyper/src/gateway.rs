//! [`LlmGateway`]: durable LLM calls for clients that only take a base URL.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::hash::{BuildHasher, RandomState};
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rebuno::ExecutionContext;
use rebuno::llm::{DurableLlm, TransportService};
use rebuno::transport::HyperTransport;
use tokio::net::TcpListener;

/// How many dispatches' tokens are remembered; the oldest is forgotten first.
const MAX_TOKENS: usize = 4096;

type Body = UnsyncBoxBody<Bytes, rebuno::BoxError>;

/// A loopback HTTP gateway that makes LLM clients durable when all they let you change is
/// their base URL (genai, ollama-rs, openai-api-rs, langchain-rust, …).
///
/// Inside a handler, [`LlmGateway::base_url`] returns a loopback URL that names the current
/// dispatch. A client pointed at it sends its requests here, and they are forwarded to the real
/// provider through [`rebuno::llm::DurableLlm`] bound to that execution: each call is an
/// `llm_call` step, recorded, replayed on re-delivery, streamed live and refused by policy,
/// exactly as with [`rebuno::llm::fetch`]. The URL is valid for the dispatch it was made in (a
/// re-delivery gets a new one). The gateway listens on 127.0.0.1 only and forwards only paths
/// carrying a token it issued. Dropping it stops accepting connections.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// // Once per process:
/// let gateway = rebuno_hyper::LlmGateway::start("https://api.openai.com/v1").await?;
/// // In the handler, per dispatch:
/// let base_url = gateway.base_url()?; // http://127.0.0.1:PORT/x/<token>
/// // ... build the client with `base_url` and call the model as usual ...
/// # Ok(()) }
/// ```
pub struct LlmGateway {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for LlmGateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the tokens: each one lets its holder add steps to an execution.
        f.debug_struct("LlmGateway")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .finish_non_exhaustive()
    }
}

struct Shared {
    upstream: String,
    llm: DurableLlm,
    tokens: Mutex<Tokens>,
}

/// Dispatch tokens and the executions they stand for.
#[derive(Default)]
struct Tokens {
    by_token: HashMap<String, ExecutionContext>,
    by_dispatch: HashMap<(String, u64), String>,
    order: VecDeque<String>,
    issued: u64,
    /// Keyed SipHash with keys from the OS's random source: a token says nothing about the
    /// others, so one URL cannot be turned into another dispatch's.
    keys: RandomState,
}

impl LlmGateway {
    /// Binds 127.0.0.1 on a free port and forwards to `upstream`, the provider's base URL
    /// (`https://api.openai.com/v1`); calls time out after [`rebuno::llm::DEFAULT_TIMEOUT`].
    ///
    /// # Errors
    ///
    /// When the port cannot be bound or the HTTP client cannot be built.
    pub async fn start(upstream: impl Into<String>) -> io::Result<Self> {
        let transport = HyperTransport::new().map_err(io::Error::other)?;
        Self::with_service(upstream, TransportService::new(transport)).await
    }

    /// Like [`start`](Self::start), with the service that reaches the provider (to set a
    /// timeout or another transport).
    ///
    /// # Errors
    ///
    /// When the port cannot be bound.
    pub async fn with_service(
        upstream: impl Into<String>,
        provider: TransportService,
    ) -> io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream: upstream.into().trim_end_matches('/').to_owned(),
            llm: DurableLlm::new(provider),
            tokens: Mutex::new(Tokens::default()),
        });
        let task = tokio::spawn(accept(listener, Arc::clone(&shared)));
        Ok(Self { addr, shared, task })
    }

    /// The base URL for the current execution's dispatch; give it to the client as its
    /// provider base URL.
    ///
    /// # Errors
    ///
    /// [`rebuno::ErrorKind::Context`] outside a handler.
    pub fn base_url(&self) -> rebuno::Result<String> {
        Ok(self.base_url_for(&rebuno::execution()?))
    }

    /// The base URL for `context`'s dispatch (for calls made outside the handler's scope).
    pub fn base_url_for(&self, context: &ExecutionContext) -> String {
        let token = lock(&self.shared.tokens).issue(context);
        format!("http://{}/x/{token}", self.addr)
    }

    /// Where the gateway listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for LlmGateway {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Tokens {
    /// The token of `context`'s dispatch, issuing one on first use.
    fn issue(&mut self, context: &ExecutionContext) -> String {
        let dispatch = (context.dispatch_id().to_owned(), context.dispatch_attempt());
        if let Some(token) = self.by_dispatch.get(&dispatch) {
            return token.clone();
        }
        let token = self.mint();
        self.by_dispatch.insert(dispatch, token.clone());
        self.by_token.insert(token.clone(), context.clone());
        self.order.push_back(token.clone());
        while self.order.len() > MAX_TOKENS {
            if let Some(old) = self.order.pop_front()
                && let Some(forgotten) = self.by_token.remove(&old)
            {
                self.by_dispatch.remove(&(
                    forgotten.dispatch_id().to_owned(),
                    forgotten.dispatch_attempt(),
                ));
            }
        }
        token
    }

    /// A new 128-bit token.
    fn mint(&mut self) -> String {
        self.issued += 1;
        let (high, low) = (
            self.keys.hash_one((self.issued, 0u8)),
            self.keys.hash_one((self.issued, 1u8)),
        );
        format!("{high:016x}{low:016x}")
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!(%error, "LLM gateway: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let shared = Arc::clone(&shared);
        let service = hyper::service::service_fn(move |request| {
            let shared = Arc::clone(&shared);
            async move { Ok::<_, Infallible>(forward(&shared, request).await) }
        });
        tokio::spawn(async move {
            let served = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(error) = served {
                tracing::debug!(%error, "LLM gateway: connection ended with an error");
            }
        });
    }
}

/// Forwards one request through the durable recorder of the execution its token names.
async fn forward(shared: &Shared, request: http::Request<Incoming>) -> http::Response<Body> {
    let (parts, body) = request.into_parts();
    let Some((token, rest)) = split_path(parts.uri.path()) else {
        return plain(http::StatusCode::NOT_FOUND, "not a gateway path");
    };
    let Some(context) = lock(&shared.tokens).by_token.get(token).cloned() else {
        return plain(
            http::StatusCode::NOT_FOUND,
            "unknown or expired gateway token",
        );
    };
    let body = match body.collect().await {
        Ok(body) => body.to_bytes(),
        Err(error) => return plain(http::StatusCode::BAD_REQUEST, &error.to_string()),
    };
    let query = parts
        .uri
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let mut outbound = http::Request::new(body);
    *outbound.method_mut() = parts.method;
    *outbound.headers_mut() = parts.headers;
    outbound.headers_mut().remove(http::header::HOST);
    outbound.headers_mut().remove(http::header::CONTENT_LENGTH);
    match format!("{}{rest}{query}", shared.upstream).parse() {
        Ok(uri) => *outbound.uri_mut() = uri,
        Err(_) => return plain(http::StatusCode::BAD_REQUEST, "invalid upstream URL"),
    }
    match shared.llm.clone().bound(context).send(outbound).await {
        Ok(response) => response.map(BodyExt::boxed_unsync),
        Err(error) => {
            tracing::warn!(%error, "LLM gateway: the call failed");
            plain(http::StatusCode::BAD_GATEWAY, &error.to_string())
        }
    }
}

/// `/x/<token>/<rest>` → (token, `/<rest>`).
fn split_path(path: &str) -> Option<(&str, &str)> {
    let tail = path.strip_prefix("/x/")?;
    let (token, rest) = tail.find('/').map_or((tail, ""), |at| tail.split_at(at));
    (!token.is_empty()).then_some((token, rest))
}

fn plain(status: http::StatusCode, message: &str) -> http::Response<Body> {
    let body = Full::new(Bytes::from(message.to_owned())).map_err(|never| match never {});
    let mut response = http::Response::new(BodyExt::boxed_unsync(body));
    *response.status_mut() = status;
    response
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_do_not_follow_from_one_another() {
        let (mut one, mut other) = (Tokens::default(), Tokens::default());
        let first = one.mint();
        let second = one.mint();
        // No part shared to build the next one from, and another gateway's first token differs.
        assert_eq!((first.len(), second.len()), (32, 32));
        assert_ne!(first[..16], second[..16]);
        assert_ne!(first[16..], second[16..]);
        assert_ne!(other.mint(), first);
    }

    #[test]
    fn gateway_paths_split_into_token_and_rest() {
        assert_eq!(
            split_path("/x/abc/chat/completions"),
            Some(("abc", "/chat/completions"))
        );
        assert_eq!(split_path("/x/abc"), Some(("abc", "")));
        assert_eq!(split_path("/x/abc/"), Some(("abc", "/")));
        assert_eq!(split_path("/y/abc/chat"), None);
        assert_eq!(split_path("/x/"), None);
    }
}
