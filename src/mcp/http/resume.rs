//! Resuming an event stream that ended before the response: `GET` with `Last-Event-ID`.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, header};

use super::answer::{Failure, Position, read_start, snippet};
use super::session::{Negotiated, Session};
use crate::transport::ByteStream;

/// Most resumptions of one request's stream.
pub(super) const MAX_RESUMES: usize = 10;

/// The wait before reconnecting when the server named none.
const DEFAULT_RETRY: Duration = Duration::from_millis(500);

/// Longest wait the client honours; a server asking for more gets this.
const MAX_RETRY: Duration = Duration::from_secs(30);

/// The stream after `position`, or `None` when it cannot be resumed (no event id, too many
/// resumptions, or no execution to take a clock from).
pub(super) async fn resume(
    session: &Session,
    negotiated: &Negotiated,
    position: &mut Position,
) -> Option<Result<ByteStream, Failure>> {
    let last = position.last_event_id.clone()?;
    if position.resumes >= MAX_RESUMES {
        return None;
    }
    let (context, _) = crate::context::current_step()?;
    position.resumes += 1;
    let wait = position
        .retry_ms
        .map_or(DEFAULT_RETRY, Duration::from_millis)
        .min(MAX_RETRY);
    context.kernel().runtime().sleep(wait).await;
    Some(reconnect(session, negotiated, &last).await)
}

/// `GET` the endpoint for the events after `last`.
async fn reconnect(
    session: &Session,
    negotiated: &Negotiated,
    last: &str,
) -> Result<ByteStream, Failure> {
    let mut request = session.build(Method::GET, Bytes::new(), negotiated)?;
    let headers = request.headers_mut();
    headers.remove(header::CONTENT_TYPE);
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("text/event-stream"),
    );
    let last = HeaderValue::from_str(last)
        .map_err(|_| Failure::Protocol(format!("unusable event id {last:?}")))?;
    headers.insert("last-event-id", last);
    let response = session
        .transport
        .send_streaming(request, session.timeout)
        .await
        .map_err(Failure::Transport)?;
    let (parts, body) = response.into_parts();
    if !parts.status.is_success() {
        let start = read_start(body).await;
        return Err(Failure::Http {
            status: parts.status,
            body: format!("resuming the event stream: {}", snippet(&start)),
        });
    }
    Ok(body)
}
