//! The body of a response from a durable LLM call.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use http_body::{Body, Frame, SizeHint};

use crate::error::BoxError;
use crate::transport::ByteStream;

/// A provider response body: whole (a JSON answer, a refusal), chunked (a replayed stream) or
/// live (a streamed answer being recorded as it is read).
///
/// It is an [`http_body::Body`] and a [`Stream`] of chunks. Read it to its end, or drop it:
/// either way a live stream is recorded once. Dropping it early records what arrived so far.
///
/// ```
/// # async fn demo() -> Result<(), rebuno::BoxError> {
/// let body = rebuno::llm::LlmBody::full("{\"ok\":true}".into());
/// assert_eq!(body.text().await?, "{\"ok\":true}");
/// # Ok(()) }
/// ```
pub struct LlmBody {
    kind: Kind,
}

/// A body held in memory comes out in chunks of at most `size` bytes (`usize::MAX`: whole).
enum Kind {
    Chunked { rest: Bytes, size: usize },
    Stream(ByteStream),
}

impl LlmBody {
    /// A body of `bytes`, in one chunk.
    pub fn full(bytes: Bytes) -> Self {
        Self::chunked(bytes, usize::MAX)
    }

    /// `bytes` served in chunks of at most `size` bytes (at least one).
    pub fn chunked(bytes: Bytes, size: usize) -> Self {
        Self {
            kind: Kind::Chunked {
                rest: bytes,
                size: size.max(1),
            },
        }
    }

    /// A body read from `stream`.
    pub fn from_stream(stream: ByteStream) -> Self {
        Self {
            kind: Kind::Stream(stream),
        }
    }

    /// Reads the whole body.
    ///
    /// # Errors
    ///
    /// When the provider's stream fails.
    pub async fn bytes(mut self) -> Result<Bytes, BoxError> {
        if let Some(whole) = self.take_full() {
            return Ok(whole);
        }
        let mut whole = Vec::new();
        while let Some(chunk) = self.next().await {
            whole.extend_from_slice(&chunk?);
        }
        Ok(Bytes::from(whole))
    }

    /// Reads the whole body as UTF-8 text (invalid sequences become U+FFFD).
    ///
    /// # Errors
    ///
    /// When the provider's stream fails.
    pub async fn text(self) -> Result<String, BoxError> {
        let bytes = self.bytes().await?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The chunks, as a boxed stream.
    pub fn into_stream(self) -> ByteStream {
        match self.kind {
            Kind::Stream(stream) => stream,
            chunked @ Kind::Chunked { .. } => Box::pin(Self { kind: chunked }),
        }
    }

    /// The bytes of a body that is already whole.
    fn take_full(&mut self) -> Option<Bytes> {
        match &mut self.kind {
            Kind::Chunked { rest, .. } => Some(std::mem::take(rest)),
            Kind::Stream(_) => None,
        }
    }

    #[cfg(test)]
    pub(crate) fn try_into_full(mut self) -> Option<Bytes> {
        self.take_full()
    }
}

impl Stream for LlmBody {
    type Item = Result<Bytes, BoxError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match &mut self.kind {
            Kind::Chunked { rest, size } => {
                if rest.is_empty() {
                    return Poll::Ready(None);
                }
                let n = (*size).min(rest.len());
                Poll::Ready(Some(Ok(rest.split_to(n))))
            }
            Kind::Stream(stream) => stream.as_mut().poll_next(cx),
        }
    }
}

impl Body for LlmBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.poll_next(cx)
            .map(|chunk| chunk.map(|c| c.map(Frame::data)))
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Chunked { rest, .. } => rest.is_empty(),
            Kind::Stream(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Chunked { rest, .. } => SizeHint::with_exact(rest.len() as u64),
            Kind::Stream(_) => SizeHint::default(),
        }
    }
}

impl fmt::Debug for LlmBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Chunked { .. } => "in memory",
            Kind::Stream(_) => "stream",
        };
        f.debug_struct("LlmBody").field("kind", &kind).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn chunked_bodies_come_in_pieces_of_the_given_size() {
        let body = LlmBody::chunked(Bytes::from(vec![b'a'; 10_000]), 4096);
        let sizes: Vec<usize> = body
            .map(|c| c.map(|c| c.len()).unwrap_or(0))
            .collect()
            .await;
        assert_eq!(sizes, [4096, 4096, 1808]);
    }

    #[tokio::test]
    async fn full_bodies_come_whole_and_empty_ones_end_at_once() {
        let sizes: Vec<usize> = LlmBody::full(Bytes::from(vec![b'a'; 10_000]))
            .map(|c| c.map(|c| c.len()).unwrap_or(0))
            .collect()
            .await;
        assert_eq!(sizes, [10_000]);
        let empty = LlmBody::full(Bytes::new());
        assert!(empty.is_end_stream());
        assert_eq!(empty.collect::<Vec<_>>().await.len(), 0);
    }
}
