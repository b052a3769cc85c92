//! Response bodies: whole ones, and streamed ones fed through a channel (Connect server
//! streams), which can also be cut off mid-stream the way a dropped connection is.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body::{Body as HttpBody, Frame};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use tokio::sync::mpsc;

/// Every response's body.
pub(crate) type Body = BoxBody<Bytes, io::Error>;

/// A whole body.
pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// A response with a whole body and a content type.
pub(crate) fn response(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Body> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// A JSON response.
pub(crate) fn json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    response(status, "application/json", value.to_string())
}

/// A response without a body.
pub(crate) fn empty(status: StatusCode) -> Response<Body> {
    let mut resp = Response::new(full(Bytes::new()));
    *resp.status_mut() = status;
    resp
}

/// The sending half of a streamed body. `Err` items end the body with an error: hyper then
/// closes the connection without finishing the response, as a dropped connection would.
pub(crate) type ChunkSender = mpsc::Sender<io::Result<Bytes>>;

/// A body streamed from a channel, and the channel's sender.
pub(crate) fn channel() -> (ChunkSender, Body) {
    let (tx, rx) = mpsc::channel(64);
    (tx, ChannelBody { rx }.boxed())
}

struct ChannelBody {
    rx: mpsc::Receiver<io::Result<Bytes>>,
}

impl HttpBody for ChannelBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.rx
            .poll_recv(cx)
            .map(|item| item.map(|chunk| chunk.map(Frame::data)))
    }
}
