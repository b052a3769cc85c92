//! The SSE route `GET /v0/executions/{id}/stream` and the delta route
//! `POST /v0/executions/{id}/steps/{step_id}/stream`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::{Instant, Interval};
use tokio_util::sync::CancellationToken;

use super::auth::{Caller, Leased, NotAgent, scope};
use super::error::{ApiResult, no_content};
use super::parse_id;
use crate::kernel::{DeltaRequest, Kernel};

/// SSE comment sent every 15 s so proxies keep the connection.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// `POST .../steps/{step_id}/stream`: an agent publishes a delta (`204`).
pub(super) async fn publish(
    State(kernel): State<Kernel>,
    Path((_, step_id)): Path<(String, String)>,
    call: Leased,
) -> ApiResult {
    let delta: DeltaRequest = call.decode()?;
    kernel.stream_delta(call.id, &call.principal, call.lease, &step_id, delta)?;
    Ok(no_content())
}

struct Feed {
    first: bool,
    deltas: broadcast::Receiver<Arc<str>>,
    keep_alive: Interval,
    shutdown: CancellationToken,
}

impl Feed {
    async fn next(mut self) -> Option<(Result<Bytes, Infallible>, Self)> {
        if self.first {
            self.first = false;
            return Some((Ok(Bytes::from_static(b": ok\n\n")), self));
        }
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => return None,
                _ = self.keep_alive.tick() => {
                    return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), self));
                }
                frame = self.deltas.recv() => match frame {
                    Ok(frame) => return Some((Ok(Bytes::from(format!("data: {frame}\n\n"))), self)),
                    Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return None,
                },
            }
        }
    }
}

/// `GET /v0/executions/{id}/stream`: live deltas as server-sent events (bearer only).
pub(super) async fn subscribe(
    State(kernel): State<Kernel>,
    Path(id): Path<String>,
    _: NotAgent,
    caller: Caller<scope::ExecutionsRead>,
) -> ApiResult {
    let id = parse_id(&id)?;
    let deltas = kernel.subscribe_deltas(id, &caller.principal)?;
    let feed = Feed {
        first: true,
        deltas,
        keep_alive: tokio::time::interval_at(Instant::now() + KEEP_ALIVE, KEEP_ALIVE),
        shutdown: kernel.shutdown_token().clone(),
    };
    let stream = futures_util::stream::unfold(feed, Feed::next);
    let mut response = (StatusCode::OK, Body::from_stream(stream)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}
