//! The exporter: the spans a layer finished, buffered until a flush sends them, with the
//! metrics, to the OTLP endpoint.

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;

use super::metrics::Metrics;
use super::record::{Attribute, FinishedSpan, unix_nanos_now};
use super::{config, otlp};
use crate::error::{Error, ErrorKind, Result};
use crate::transport::SharedTransport;

/// Spans per export request (a collector takes 4 MiB bodies by default; a span is ~1 KiB).
const SPANS_PER_REQUEST: usize = 512;

/// What a [`Telemetry`](super::Telemetry), its layers and the runs share: the settings, the
/// buffer and the metrics. Made by the builder.
pub(super) struct Exporter {
    pub(super) traces_url: String,
    pub(super) metrics_url: Option<String>,
    pub(super) headers: http::HeaderMap,
    pub(super) transport: SharedTransport,
    pub(super) timeout: Duration,
    pub(super) resource: Vec<Attribute>,
    pub(super) export_replayed: bool,
    /// The longest a finished span waits for an export while its run goes on.
    pub(super) export_interval: Duration,
    /// Whether an export is scheduled ([`schedule_after_step`](super::handoff::schedule_after_step)).
    pub(super) export_scheduled: AtomicBool,
    /// The least time between two metrics exports from runs' own flushes.
    pub(super) metrics_interval: Duration,
    /// The most verbose level of span and event exported.
    pub(super) level: tracing::Level,
    pub(super) max_buffered: usize,
    pub(super) pending: Mutex<VecDeque<FinishedSpan>>,
    pub(super) metrics: Mutex<Metrics>,
    /// One export at a time: runs that finish together share it.
    pub(super) flight: futures_util::lock::Mutex<()>,
}

impl Exporter {
    pub(super) fn lock_pending(&self) -> MutexGuard<'_, VecDeque<FinishedSpan>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn with_metrics(&self, update: impl FnOnce(&mut Metrics)) {
        update(&mut self.metrics.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// Buffers a finished span, dropping the oldest past the limit.
    pub(super) fn push(&self, span: FinishedSpan) {
        self.lock_pending().push_back(span);
        self.trim();
    }

    /// Puts back spans an export failed to send, ahead of newer ones.
    fn requeue(&self, spans: Vec<FinishedSpan>) {
        let mut pending = self.lock_pending();
        for span in spans.into_iter().rev() {
            pending.push_front(span);
        }
        drop(pending);
        self.trim();
    }

    /// Drops the oldest spans past the limit, counting them.
    fn trim(&self) {
        let mut pending = self.lock_pending();
        let excess = pending.len().saturating_sub(self.max_buffered);
        pending.drain(..excess);
        drop(pending);
        if excess > 0 {
            self.with_metrics(|m| m.spans_dropped(excess as u64));
        }
    }

    /// Sends the buffered spans, then the metrics if they changed (and, unless `every_time`,
    /// the metrics interval has passed since they were last sent), within `budget`.
    pub(super) async fn flush_within(&self, budget: Duration, every_time: bool) -> Result<()> {
        // The budget counts the wait for an export already under way: behind a collector that
        // never answers, runs ending together wait about one timeout in all, not one each.
        #[allow(clippy::disallowed_methods)] // web_time's `Instant` also works on wasm32
        let started = web_time::Instant::now();
        let left = || budget.saturating_sub(started.elapsed());
        let _one_at_a_time = self.flight.lock().await;
        let spans: Vec<FinishedSpan> = self.lock_pending().drain(..).collect();
        let mut rest = spans.as_slice();
        while !rest.is_empty() {
            let (batch, after) = rest.split_at(rest.len().min(SPANS_PER_REQUEST));
            let body = otlp::traces(&self.resource, batch)
                .map_err(|e| Error::serde("telemetry body", e))?;
            if let Err(error) = self.post(&self.traces_url, body, left()).await {
                if worth_retrying(&error) {
                    self.requeue(rest.to_vec());
                } else {
                    let lost = u64::try_from(batch.len()).unwrap_or(u64::MAX);
                    self.with_metrics(|m| m.spans_dropped(lost));
                    self.requeue(after.to_vec());
                }
                return Err(error);
            }
            rest = after;
        }
        self.flush_metrics(left(), every_time).await
    }

    async fn flush_metrics(&self, budget: Duration, every_time: bool) -> Result<()> {
        let Some(url) = &self.metrics_url else {
            return Ok(());
        };
        let snapshot = {
            let mut metrics = self.metrics.lock().unwrap_or_else(PoisonError::into_inner);
            let now = unix_nanos_now();
            let interval = u64::try_from(self.metrics_interval.as_nanos()).unwrap_or(u64::MAX);
            let due = every_time || now.saturating_sub(metrics.exported_unix_nanos) >= interval;
            if !metrics.dirty || !due {
                return Ok(());
            }
            metrics.dirty = false;
            metrics.exported_unix_nanos = now;
            metrics.clone()
        };
        let body = serde_json::to_vec(&otlp::metrics(&self.resource, &snapshot, unix_nanos_now()))
            .map_err(|e| Error::serde("telemetry body", e))?;
        let sent = self.post(url, body, budget).await;
        if sent.is_err() {
            self.with_metrics(|metrics| metrics.dirty = true);
        }
        sent
    }

    async fn post(&self, url: &str, bytes: Vec<u8>, budget: Duration) -> Result<()> {
        if budget.is_zero() {
            return Err(Error::new(
                ErrorKind::Timeout,
                "no time left to export telemetry",
            ));
        }
        let mut request = http::Request::post(url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Bytes::from(bytes))
            .map_err(|e| config("telemetry request").with_source(e))?;
        request.headers_mut().extend(self.headers.clone());
        let response = self
            .transport
            .send(request, budget)
            .await
            .map_err(|error| {
                let kind = match error.kind() {
                    crate::transport::TransportErrorKind::Timeout => ErrorKind::Timeout,
                    _ => ErrorKind::Network,
                };
                let cause = crate::error::error_chain(&error);
                Error::new(
                    kind,
                    format!(
                        "telemetry export to {url} failed: {cause}; is the collector running \
                         there? (OTEL_EXPORTER_OTLP_ENDPOINT or Telemetry::otlp)"
                    ),
                )
                .with_source(error)
            })?;
        if response.status().is_success() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(response.body());
        Err(Error::new(
            ErrorKind::Protocol,
            format!(
                "telemetry endpoint {url} answered {}: {}",
                response.status(),
                text.chars().take(200).collect::<String>()
            ),
        )
        .with_status(response.status()))
    }
}

/// Whether a failed export may succeed if sent again: the endpoint was not reached or timed
/// out (a timed-out batch may arrive twice; collectors keep the first of a span id), or it
/// asked for a retry (429, 502, 503, 504, as OTLP/HTTP specifies). A body the endpoint refused
/// (400) is dropped, or it would be refused forever.
fn worth_retrying(error: &Error) -> bool {
    match error.status() {
        Some(status) => matches!(status.as_u16(), 429 | 502 | 503 | 504),
        None => matches!(error.kind(), ErrorKind::Network | ErrorKind::Timeout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::Telemetry;
    use crate::telemetry::record::SpanKind;
    use crate::transport::{Transport, TransportError, TransportErrorKind, TransportFuture};
    use std::sync::Arc;

    /// Answers each export with the next scripted status (0: the connection is refused) and
    /// counts the spans it was sent.
    #[derive(Debug, Default)]
    struct Scripted {
        answers: std::sync::Mutex<Vec<u16>>,
        received: std::sync::atomic::AtomicUsize,
    }

    impl Transport for Arc<Scripted> {
        fn send(&self, request: http::Request<Bytes>, _: Duration) -> TransportFuture {
            let status = self.answers.lock().unwrap().remove(0);
            let body: serde_json::Value = serde_json::from_slice(request.body()).unwrap();
            let spans = body["resourceSpans"][0]["scopeSpans"][0]["spans"]
                .as_array()
                .map_or(0, Vec::len);
            let me = Arc::clone(self);
            Box::pin(async move {
                if status == 0 {
                    return Err(TransportError::new(TransportErrorKind::Connect, "refused"));
                }
                if status == 200 {
                    me.received
                        .fetch_add(spans, std::sync::atomic::Ordering::SeqCst);
                }
                Ok(http::Response::builder()
                    .status(status)
                    .body(Bytes::new())
                    .unwrap())
            })
        }
    }

    fn span() -> FinishedSpan {
        FinishedSpan {
            trace: [1; 16],
            span: [2; 8],
            parent: None,
            name: "local x".to_owned(),
            kind: SpanKind::Internal,
            start_unix_nanos: 1,
            end_unix_nanos: 2,
            attributes: Vec::new(),
            events: Vec::new(),
            links: Vec::new(),
            error: None,
        }
    }

    fn exporter(answers: &[u16], limit: usize) -> (Telemetry, Arc<Scripted>) {
        let scripted = Arc::new(Scripted::default());
        scripted.answers.lock().unwrap().extend_from_slice(answers);
        let telemetry = Telemetry::otlp("http://collector:4318")
            .transport(Arc::clone(&scripted))
            .metrics(false)
            .max_buffered_spans(limit)
            .build()
            .unwrap();
        (telemetry, scripted)
    }

    #[tokio::test]
    async fn an_unreachable_or_busy_endpoint_keeps_the_spans_for_the_next_flush() {
        let (telemetry, scripted) = exporter(&[0, 503, 200], 100);
        for _ in 0..3 {
            telemetry.shared.push(span());
        }
        assert_eq!(
            telemetry.flush().await.unwrap_err().kind(),
            ErrorKind::Network
        );
        assert_eq!(telemetry.buffered_spans(), 3);
        assert_eq!(
            telemetry
                .flush()
                .await
                .unwrap_err()
                .status()
                .map(|s| s.as_u16()),
            Some(503)
        );
        assert_eq!(telemetry.buffered_spans(), 3);
        telemetry.flush().await.unwrap();
        assert_eq!(telemetry.buffered_spans(), 0);
        assert_eq!(
            scripted.received.load(std::sync::atomic::Ordering::SeqCst),
            3
        );
    }

    /// A collector that takes every request and never answers: each send ends at its timeout.
    #[derive(Debug, Default)]
    struct Silent {
        sent: std::sync::atomic::AtomicUsize,
    }

    impl Transport for Arc<Silent> {
        fn send(&self, _: http::Request<Bytes>, timeout: Duration) -> TransportFuture {
            self.sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(async move {
                tokio::time::sleep(timeout).await;
                Err(TransportError::new(
                    TransportErrorKind::Timeout,
                    "no answer",
                ))
            })
        }
    }

    #[tokio::test]
    async fn runs_ending_together_wait_about_one_timeout_for_a_silent_collector_not_one_each() {
        let silent = Arc::new(Silent::default());
        let timeout = Duration::from_millis(300);
        let telemetry = Telemetry::otlp("http://collector:4318")
            .transport(Arc::clone(&silent))
            .metrics(false)
            .timeout(timeout)
            .build()
            .unwrap();
        #[allow(clippy::disallowed_methods)]
        let started = std::time::Instant::now();
        // Ten runs ending together, polled concurrently as a host would.
        let flushes = (0..10).map(|_| {
            let shared = Arc::clone(&telemetry.shared);
            async move {
                shared.push(span());
                shared.flush_within(timeout, false).await
            }
        });
        for flush in futures_util::future::join_all(flushes).await {
            assert!(flush.is_err(), "nothing was answered");
        }
        let took = started.elapsed();
        assert!(
            took < timeout * 3,
            "10 runs behind a silent collector took {took:?}, not ~{timeout:?}"
        );
        assert_eq!(telemetry.buffered_spans(), 10, "kept for the next flush");
        assert!(silent.sent.load(std::sync::atomic::Ordering::SeqCst) <= 2);
    }

    #[tokio::test]
    async fn a_refused_body_is_dropped_and_counted_not_sent_forever() {
        let (telemetry, _) = exporter(&[400], 100);
        telemetry.shared.push(span());
        assert!(telemetry.flush().await.is_err());
        assert_eq!(telemetry.buffered_spans(), 0);
        let dropped = telemetry.shared.metrics.lock().unwrap().dropped_spans;
        assert_eq!(dropped, 1);
    }

    #[tokio::test]
    async fn the_buffer_keeps_the_newest_spans_up_to_its_limit() {
        let (telemetry, _) = exporter(&[0], 2);
        for _ in 0..5 {
            telemetry.shared.push(span());
        }
        assert_eq!(telemetry.buffered_spans(), 2);
        assert!(telemetry.flush().await.is_err());
        assert_eq!(telemetry.buffered_spans(), 2);
        assert_eq!(telemetry.shared.metrics.lock().unwrap().dropped_spans, 3);
    }
}
