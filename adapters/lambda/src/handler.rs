//! The lambda_http service: hands each HTTP event to [`Agent::handle`] and keeps the
//! acknowledged run alive the way the [`BackgroundMode`] says.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::Full;
use lambda_http::RequestExt;
use lambda_runtime::tower::Service;
use rebuno::rt::{Deadline, Task};
use rebuno::{Agent, Body, Dispatch};
use tracing::Instrument;

use crate::BackgroundMode;
use crate::deadline::{DeadlinePolicy, unix_millis};
use crate::holds::Holds;

/// Where acknowledged runs go.
#[derive(Clone, Debug)]
pub(crate) enum Continuation {
    /// Spawned on Tokio, each holding its invocation's request id until it is done.
    Held(Holds),
    /// Awaited before the response is returned.
    Inline,
}

impl Continuation {
    pub(crate) fn new(mode: BackgroundMode, holds: &Holds) -> Self {
        match mode {
            BackgroundMode::Extension => Self::Held(holds.clone()),
            BackgroundMode::Inline => Self::Inline,
        }
    }

    async fn keep(&self, task: Task, request_id: Option<String>) {
        match self {
            Self::Inline => task.await,
            Self::Held(holds) => spawn_held(holds, task, request_id.as_deref()),
        }
    }
}

/// Spawns the run with a hold on its invocation, so the extension keeps the sandbox unfrozen
/// until the run ends.
fn spawn_held(holds: &Holds, task: Task, request_id: Option<&str>) {
    let hold = request_id.and_then(|id| holds.hold(id));
    if hold.is_none() {
        tracing::warn!(
            request_id,
            "no hold on this invocation; the run may be frozen with the sandbox"
        );
    }
    tokio::spawn(
        async move {
            task.await;
            drop(hold);
        }
        .in_current_span(),
    );
}

/// The `Service<lambda_http::Request>` that lambda_http drives.
#[derive(Clone, Debug)]
pub(crate) struct Handler {
    agent: Agent,
    continuation: Continuation,
    deadline_margin: Duration,
    deadline_policy: DeadlinePolicy,
}

impl Handler {
    pub(crate) fn new(
        agent: Agent,
        continuation: Continuation,
        deadline_margin: Duration,
        deadline_policy: DeadlinePolicy,
    ) -> Self {
        Self {
            agent,
            deadline_policy,
            continuation,
            deadline_margin,
        }
    }

    async fn serve(self, request: lambda_http::Request) -> http::Response<Body> {
        if is_probe(request.method()) {
            return probe_response();
        }
        let context = request.lambda_context_ref();
        let request_id = context.map(|context| context.request_id.clone());
        // The run yields before its next step near the invocation's deadline (Lambda freezes
        // the sandbox there); the kernel re-delivers and the next invocation replays.
        let deadline = context
            .and_then(|context| {
                self.deadline_policy
                    .resolve(context.deadline, unix_millis())
            })
            .map(|at| Deadline::at_unix_millis(at).margin(self.deadline_margin));
        let mut request = to_bytes_request(request);
        if let Some(deadline) = deadline {
            request.extensions_mut().insert(deadline);
        }
        let Dispatch {
            response,
            background,
            ..
        } = self.agent.handle(request).await;
        if let Some(task) = background {
            self.continuation.keep(task, request_id).await;
        }
        response
    }
}

impl Service<lambda_http::Request> for Handler {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: lambda_http::Request) -> Self::Future {
        let handler = self.clone();
        Box::pin(async move { Ok(handler.serve(request).await) })
    }
}

/// `GET`/`HEAD` answer `200 ok` (ALB health checks, uptime probes) without touching the agent.
fn is_probe(method: &Method) -> bool {
    method == Method::GET || method == Method::HEAD
}

fn probe_response() -> http::Response<Body> {
    let mut response = http::Response::new(Body::from("ok"));
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The same request with its body as bytes: method, URI, headers and extensions (the Lambda
/// context and request context) are kept as they are.
pub(crate) fn to_bytes_request(request: lambda_http::Request) -> http::Request<Full<Bytes>> {
    request.map(|body| Full::new(body_bytes(body)))
}

fn body_bytes(body: lambda_http::Body) -> Bytes {
    match body {
        lambda_http::Body::Text(text) => Bytes::from(text),
        lambda_http::Body::Binary(bytes) => Bytes::from(bytes),
        other => Bytes::copy_from_slice(&other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_become_bytes_unchanged() {
        assert_eq!(body_bytes(lambda_http::Body::Empty), Bytes::new());
        assert_eq!(
            body_bytes("{\"a\":1}".into()),
            Bytes::from_static(b"{\"a\":1}")
        );
        assert_eq!(
            body_bytes(vec![0u8, 255].into()),
            Bytes::from_static(&[0, 255])
        );
    }

    #[test]
    fn only_get_and_head_are_probes() {
        assert!(is_probe(&Method::GET) && is_probe(&Method::HEAD));
        assert!(!is_probe(&Method::POST));
    }
}
