//! The tee a streamed answer is read through: every chunk goes to the consumer unchanged, its
//! text is gathered for the record and published live as deltas, and the step is settled once.
//!
//! - End of stream: the remaining deltas are published and the answer is recorded *before* the
//!   consumer sees the end, so a handler that read to the end has a recorded step.
//! - An error from the provider mid-stream fails the step, then reaches the consumer.
//! - Dropped early (rig stops reading at `data: [DONE]`): what arrived so far is recorded as the
//!   answer. `Drop` cannot wait, so that work is handed to the execution, which runs it before
//!   its next step and before the dispatch ends.
//!
//! No task is spawned and no timer is armed: deltas advance as the consumer polls.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::{FutureExt, Stream};

use super::delta::{Delta, Deltas};
use super::record::Record;
use super::step::LlmStep;
use crate::error::BoxError;
use crate::rt::BoxFuture;
use crate::transport::ByteStream;

/// The tee over a provider's streamed body.
pub(super) struct Tee {
    inner: ByteStream,
    /// The open step; `None` once its outcome was handed to `closing` (or recorded).
    step: Option<LlmStep>,
    /// The step, kept to hand drop-time work to its execution.
    owner: LlmStep,
    status: u16,
    content_type: String,
    text: String,
    deltas: Deltas,
    /// The delta publish in flight, polled whenever the consumer polls.
    publishing: Option<BoxFuture<'static, ()>>,
    /// Settling the step; yields the error the consumer sees last, if any.
    closing: Option<BoxFuture<'static, Option<BoxError>>>,
    done: bool,
}

impl Tee {
    pub(super) fn new(inner: ByteStream, step: LlmStep, status: u16, content_type: String) -> Self {
        let deltas = Deltas::new(step.now());
        Self {
            inner,
            owner: step.clone(),
            step: Some(step),
            status,
            content_type,
            text: String::new(),
            deltas,
            publishing: None,
            closing: None,
            done: false,
        }
    }

    /// Accounts for one chunk: its text, and a delta flush when one is due and none is in flight.
    fn account(&mut self, chunk: &Bytes, cx: &mut Context<'_>) {
        let text = self.deltas.push(chunk);
        self.text.push_str(&text);
        let Some(step) = &self.step else { return };
        let now = step.now();
        if self.publishing.is_none() && self.deltas.due(now) {
            let pieces = self.deltas.flush(now);
            if !pieces.is_empty() {
                let step = step.clone();
                self.publishing = Some(Box::pin(async move { step.publish(pieces).await }));
                self.poll_publishing(cx);
            }
        }
    }

    fn poll_publishing(&mut self, cx: &mut Context<'_>) {
        if let Some(publishing) = &mut self.publishing
            && publishing.poll_unpin(cx).is_ready()
        {
            self.publishing = None;
        }
    }

    /// The work that records the answer so far: the in-flight and remaining deltas, then the
    /// record. `None` when the step was already settled.
    fn finish(&mut self) -> Option<BoxFuture<'static, Option<BoxError>>> {
        let step = self.step.take()?;
        let tail = self.deltas.finish();
        self.text.push_str(&tail);
        let last: Vec<Delta> = self.deltas.flush(step.now());
        let publishing = self.publishing.take();
        let record = Record::new(
            self.status,
            &self.content_type,
            std::mem::take(&mut self.text),
        );
        Some(Box::pin(async move {
            if let Some(publishing) = publishing {
                publishing.await;
            }
            step.publish(last).await;
            step.record(&record)
                .await
                .err()
                .map(|e| Box::new(e) as BoxError)
        }))
    }

    /// The work that fails the step with `error`, then hands the error back.
    fn fail(&mut self, error: BoxError) -> BoxFuture<'static, Option<BoxError>> {
        let step = self.step.take();
        let publishing = self.publishing.take();
        Box::pin(async move {
            drop(publishing);
            if let Some(step) = step
                && let Err(stop) = step.fail(crate::error::error_chain(&*error)).await
            {
                tracing::debug!(%stop, "failing the LLM call met control flow");
            }
            Some(error)
        })
    }
}

impl Stream for Tee {
    type Item = Result<Bytes, BoxError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            if let Some(closing) = &mut this.closing {
                let last = std::task::ready!(closing.poll_unpin(cx));
                this.closing = None;
                this.done = true;
                return Poll::Ready(last.map(Err));
            }
            this.poll_publishing(cx);
            match std::task::ready!(this.inner.as_mut().poll_next(cx)) {
                Some(Ok(chunk)) => {
                    this.account(&chunk, cx);
                    return Poll::Ready(Some(Ok(chunk)));
                }
                Some(Err(error)) => this.closing = Some(this.fail(error)),
                None => {
                    this.closing = this.finish();
                    if this.closing.is_none() {
                        this.done = true;
                    }
                }
            }
        }
    }
}

impl Drop for Tee {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Some(work) = self.closing.take().or_else(|| self.finish()) {
            self.owner.defer(Box::pin(work.map(drop)));
        }
    }
}
