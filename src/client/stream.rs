//! `Client::stream`: an execution's live step deltas (server-sent events), as a stream.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use http::Method;
use serde::Deserialize;

use super::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::kernel::encode_segment;
use crate::sse::SseBuffer;
use crate::transport::ByteStream;

/// How long one subscription may stay open before the transport closes it.
const SUBSCRIPTION_LIMIT: Duration = Duration::from_secs(24 * 3600);

/// One live delta of an executing step: a piece of a streamed LLM answer, in `seq` order per
/// step. Deltas are best-effort and not persisted; the step's recorded result is the truth.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct StepDelta {
    /// The step the delta belongs to.
    pub step_id: String,
    /// Its position, from 0, per step.
    pub seq: i64,
    /// The text.
    pub data: String,
}

/// The live deltas of one execution, from [`Client::stream`]. Ends when the kernel closes it.
pub struct DeltaStream {
    body: ByteStream,
    buffer: SseBuffer,
}

impl std::fmt::Debug for DeltaStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeltaStream").finish_non_exhaustive()
    }
}

impl Client {
    /// Subscribes to an execution's live step deltas (`GET /v0/executions/{id}/stream`).
    ///
    /// Only deltas published after the subscription starts arrive: subscribe before the
    /// step streams, and read the recorded step for the whole answer.
    ///
    /// ```no_run
    /// # async fn demo(client: rebuno::client::Client, id: &str) -> rebuno::Result<()> {
    /// use futures_util::StreamExt;
    /// let mut deltas = client.stream(id).await?;
    /// while let Some(delta) = deltas.next().await {
    ///     print!("{}", delta?.data);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Api`] (`not_found`) for an unknown execution; network errors.
    pub async fn stream(&self, execution_id: &str) -> Result<DeltaStream> {
        let path = format!("/v0/executions/{}/stream", encode_segment(execution_id));
        let request = self.build(Method::GET, &path, None)?;
        let response = self
            .inner
            .exchange
            .transport
            .send_streaming(request, SUBSCRIPTION_LIMIT)
            .await
            .map_err(crate::kernel::network_error)?;
        if !response.status().is_success() {
            let status = response.status();
            let body = DeltaStream::drain(response.into_body()).await;
            let error = crate::kernel::error_from_response(status, &body);
            // The request went to the transport; an identical one names what the error concerns.
            let sent = self.build(Method::GET, &path, None)?;
            return Err(self.explain(crate::kernel::explain::explain(error, &sent)));
        }
        Ok(DeltaStream {
            body: response.into_body(),
            buffer: SseBuffer::default(),
        })
    }
}

impl DeltaStream {
    async fn drain(mut body: ByteStream) -> Vec<u8> {
        use futures_util::StreamExt;
        let mut whole = Vec::new();
        while let Some(Ok(chunk)) = body.next().await {
            whole.extend_from_slice(&chunk);
        }
        whole
    }

    /// The next complete event in the buffer, if any: `Some(None)` for an event without data.
    fn next_event(&mut self) -> Option<Option<Result<StepDelta>>> {
        let event = self.buffer.next_event()?;
        Some(event.has_data.then(|| {
            serde_json::from_str(&event.data).map_err(|e| {
                Error::new(ErrorKind::Protocol, "unexpected stream event").with_source(e)
            })
        }))
    }
}

impl Stream for DeltaStream {
    type Item = Result<StepDelta>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            while let Some(event) = self.next_event() {
                if let Some(delta) = event {
                    return Poll::Ready(Some(delta));
                }
            }
            match std::task::ready!(self.body.as_mut().poll_next(cx)) {
                Some(Ok(chunk)) => self.buffer.push(&chunk),
                Some(Err(error)) => {
                    return Poll::Ready(Some(Err(Error::new(
                        ErrorKind::Network,
                        "the live stream broke",
                    )
                    .with_source(error))));
                }
                None => return Poll::Ready(None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use futures_util::StreamExt;

    fn stream_of(chunks: &[&'static [u8]]) -> DeltaStream {
        let chunks: Vec<std::result::Result<Bytes, crate::BoxError>> =
            chunks.iter().map(|c| Ok(Bytes::from_static(c))).collect();
        DeltaStream {
            body: Box::pin(futures_util::stream::iter(chunks)),
            buffer: SseBuffer::default(),
        }
    }

    #[tokio::test]
    async fn events_split_across_chunks_are_reassembled_and_comments_skipped() {
        let deltas: Vec<StepDelta> = stream_of(&[
            b": ok\n\ndata: {\"step_id\":\"s1\",\"seq\":0,",
            b"\"data\":\"He\"}\n\n: keep-alive\n\n",
            b"data: {\"step_id\":\"s1\",\"seq\":1,\"data\":\"llo\"}\r\n\r\n",
        ])
        .map(|d| d.unwrap_or_else(|e| panic!("{e}")))
        .collect()
        .await;
        let text: String = deltas.iter().map(|d| d.data.as_str()).collect();
        assert_eq!(text, "Hello");
        assert_eq!(deltas.iter().map(|d| d.seq).collect::<Vec<_>>(), [0, 1]);
    }
}
