//! Building an exporter, and sending what it buffered.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use sha2::{Digest, Sha256};

use super::metrics::Metrics;
use super::record::{Attribute, FinishedSpan, Value, unix_nanos_now};
use super::{Shared, Telemetry, otlp, register};
use crate::error::{Error, ErrorKind, Result};
use crate::transport::SharedTransport;

/// Spans per export request (a collector takes 4 MiB bodies by default; a span is ~1 KiB).
const SPANS_PER_REQUEST: usize = 512;

/// Configures a [`Telemetry`]; start with [`Telemetry::otlp`].
#[must_use = "call `build()` to make the exporter"]
pub struct TelemetryBuilder {
    endpoint: String,
    service_name: Option<String>,
    resource: Vec<Attribute>,
    headers: Vec<(String, String)>,
    transport: Option<SharedTransport>,
    timeout: Duration,
    export_replayed: bool,
    metrics: bool,
    metrics_interval: Duration,
    export_interval: Duration,
    level: tracing::Level,
    max_buffered: usize,
}

impl std::fmt::Debug for TelemetryBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let header_names: Vec<_> = self.headers.iter().map(|(name, _)| name).collect();
        f.debug_struct("TelemetryBuilder")
            .field("endpoint", &self.endpoint)
            .field("service_name", &self.service_name)
            .field("headers", &header_names)
            .field("export_replayed", &self.export_replayed)
            .finish_non_exhaustive()
    }
}

impl TelemetryBuilder {
    pub(super) fn new(endpoint: String) -> Self {
        Self {
            endpoint,
            service_name: None,
            resource: Vec::new(),
            headers: Vec::new(),
            transport: None,
            timeout: Duration::from_secs(3),
            export_replayed: false,
            metrics: true,
            metrics_interval: Duration::from_secs(10),
            export_interval: Duration::from_secs(2),
            level: tracing::Level::INFO,
            max_buffered: 4096,
        }
    }

    /// `service.name` (default `unknown_service:rebuno`).
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = Some(name.into());
        self
    }

    /// Another resource attribute (`deployment.environment`, `cloud.region`…).
    pub fn resource_attribute(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.resource.push((key.into(), Value::Text(value.into())));
        self
    }

    /// A header on every export request (`authorization`, `x-honeycomb-team`…). Its value is
    /// never printed.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The HTTP client to export with (default: the SDK's default client; on Workers, pass
    /// `rebuno_workers::FetchTransport`).
    pub fn transport(mut self, transport: impl crate::transport::Transport + 'static) -> Self {
        self.transport = Some(SharedTransport::new(transport));
        self
    }

    /// How long one flush may take at most (default 3 s). A run's own flush also stops short
    /// of its host's deadline.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Exports replayed step spans too (default `false`).
    pub fn export_replayed(mut self, export: bool) -> Self {
        self.export_replayed = export;
        self
    }

    /// The most verbose spans and events exported (default `INFO`: the SDK's spans, and
    /// yours at `INFO` and above; `DEBUG` adds the HTTP clients' connection chatter).
    pub fn level(mut self, level: tracing::Level) -> Self {
        self.level = level;
        self
    }

    /// The longest a finished step's span waits for an export while its run goes on (default
    /// 2 s; a run's end always exports at once). A process killed mid-run loses what finished
    /// within this much of the kill.
    pub fn export_interval(mut self, interval: Duration) -> Self {
        self.export_interval = interval;
        self
    }

    /// How often a run's own flush sends the metrics at most (default 10 s; [`Telemetry::flush`]
    /// always sends them). They are cumulative, so a skipped export loses only resolution; but
    /// a Lambda sandbox reaped after its last invocation loses what it counted since its last
    /// export: set `Duration::ZERO` there to send them with every run.
    pub fn metrics_interval(mut self, interval: Duration) -> Self {
        self.metrics_interval = interval;
        self
    }

    /// Exports metrics to `/v1/metrics` (default `true`).
    pub fn metrics(mut self, export: bool) -> Self {
        self.metrics = export;
        self
    }

    /// Spans kept while the endpoint cannot be reached (default 4096); the oldest go first,
    /// counted in `rebuno.telemetry.dropped_spans`.
    pub fn max_buffered_spans(mut self, limit: usize) -> Self {
        self.max_buffered = limit.max(1);
        self
    }

    /// Makes the exporter.
    ///
    /// # Errors
    ///
    /// `config` for an endpoint that is not an `http(s)://` URL, a header that is not valid
    /// HTTP, or no HTTP client compiled in and none given.
    pub fn build(self) -> Result<Telemetry> {
        let (traces_url, metrics_url) = endpoints(&self.endpoint)?;
        let headers = header_map(&self.headers)?;
        let transport = match self.transport {
            Some(transport) => transport,
            None => default_transport()?,
        };
        let start = unix_nanos_now();
        let mut resource = vec![
            (
                "service.name".to_owned(),
                Value::Text(
                    self.service_name
                        .unwrap_or_else(|| "unknown_service:rebuno".to_owned()),
                ),
            ),
            (
                "service.instance.id".to_owned(),
                Value::Text(instance_id(start)),
            ),
            (
                "telemetry.sdk.name".to_owned(),
                Value::Text("rebuno".to_owned()),
            ),
            (
                "telemetry.sdk.language".to_owned(),
                Value::Text("rust".to_owned()),
            ),
            (
                "telemetry.sdk.version".to_owned(),
                Value::Text(env!("CARGO_PKG_VERSION").to_owned()),
            ),
        ];
        resource.extend(self.resource);
        let shared = Arc::new(Shared {
            traces_url,
            metrics_url: self.metrics.then_some(metrics_url),
            headers,
            transport,
            timeout: self.timeout,
            resource,
            export_replayed: self.export_replayed,
            metrics_interval: self.metrics_interval,
            export_interval: self.export_interval,
            export_scheduled: std::sync::atomic::AtomicBool::new(false),
            level: self.level,
            max_buffered: self.max_buffered,
            pending: Mutex::new(VecDeque::new()),
            metrics: Mutex::new(Metrics::new(start)),
            flight: futures_util::lock::Mutex::new(()),
        });
        register(&shared);
        Ok(Telemetry { shared })
    }
}

fn config(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Config, message)
}

/// The traces and metrics URLs of an OTLP/HTTP endpoint.
fn endpoints(endpoint: &str) -> Result<(String, String)> {
    let uri: http::Uri = endpoint
        .parse()
        .map_err(|_| config(format!("telemetry endpoint {endpoint:?} is not a URL")))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(config(format!(
            "telemetry endpoint {endpoint:?} is not an http:// or https:// URL"
        )));
    }
    let base = endpoint.trim_end_matches('/');
    Ok(match base.strip_suffix("/v1/traces") {
        Some(root) => (base.to_owned(), format!("{root}/v1/metrics")),
        None => (format!("{base}/v1/traces"), format!("{base}/v1/metrics")),
    })
}

fn header_map(headers: &[(String, String)]) -> Result<HeaderMap> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let name = HeaderName::try_from(name.as_str())
            .map_err(|_| config(format!("telemetry header name {name:?} is not valid")))?;
        let mut value = HeaderValue::try_from(value.as_str())
            .map_err(|_| config(format!("telemetry header {name} has an invalid value")))?;
        value.set_sensitive(true);
        map.append(name, value);
    }
    Ok(map)
}

fn default_transport() -> Result<SharedTransport> {
    match crate::transport::default_transport(crate::transport::Peer::Provider) {
        Some(Ok(transport)) => Ok(transport),
        Some(Err(error)) => {
            Err(config("could not create the telemetry HTTP client").with_source(error))
        }
        None => Err(config(
            "no HTTP client compiled in for telemetry: pass one with .transport()",
        )),
    }
}

/// A process-unique id: each process is its own metrics series.
fn instance_id(start: u64) -> String {
    let marker = 0u8;
    let address = std::ptr::addr_of!(marker) as usize;
    let digest = Sha256::new()
        .chain_update(start.to_be_bytes())
        .chain_update(address.to_be_bytes())
        .finalize();
    super::ids::to_hex(&digest[..16])
}

/// A [`Telemetry`] from `OTEL_*` variables read through `var`.
pub(super) fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Option<Telemetry>> {
    from_vars(var)?.map(TelemetryBuilder::build).transpose()
}

/// A builder configured from `OTEL_*` variables read through `var`.
pub(super) fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<TelemetryBuilder>> {
    let endpoint = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"))
        .filter(|value| !value.trim().is_empty());
    let Some(endpoint) = endpoint else {
        return Ok(None);
    };
    let mut builder = Telemetry::otlp(endpoint.trim());
    if let Some(name) = var("OTEL_SERVICE_NAME").filter(|name| !name.is_empty()) {
        builder = builder.service_name(name);
    }
    for (key, value) in pairs(
        var("OTEL_RESOURCE_ATTRIBUTES").as_deref(),
        "OTEL_RESOURCE_ATTRIBUTES",
    )? {
        builder = builder.resource_attribute(key, value);
    }
    for (key, value) in pairs(
        var("OTEL_EXPORTER_OTLP_HEADERS").as_deref(),
        "OTEL_EXPORTER_OTLP_HEADERS",
    )? {
        builder = builder.header(key, value);
    }
    Ok(Some(builder))
}

/// `k1=v1,k2=v2` with percent-encoded values, as the OpenTelemetry variables write them.
fn pairs(text: Option<&str>, variable: &str) -> Result<Vec<(String, String)>> {
    let Some(text) = text else {
        return Ok(Vec::new());
    };
    text.split(',')
        .filter(|pair| !pair.trim().is_empty())
        .map(|pair| {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| config(format!("{variable}: an entry has no `=`")))?;
            Ok((key.trim().to_owned(), percent_decode(value.trim())))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let escaped = (bytes[index] == b'%')
            .then(|| text.get(index + 1..index + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                index += 3;
            }
            None => {
                out.push(bytes[index]);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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

impl Shared {
    /// Sends the buffered spans, then the metrics if they changed (and, unless `every_time`,
    /// the metrics interval has passed since they were last sent), within `budget`.
    pub(crate) async fn flush_within(&self, budget: Duration, every_time: bool) -> Result<()> {
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
            let mut metrics = self
                .metrics
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::record::{FinishedSpan, SpanKind};
    use crate::transport::{Transport, TransportError, TransportErrorKind, TransportFuture};

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

    #[test]
    fn endpoints_get_the_signal_paths() {
        let (traces, metrics) = endpoints("http://127.0.0.1:4318/").unwrap();
        assert_eq!(traces, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(metrics, "http://127.0.0.1:4318/v1/metrics");
        let (traces, metrics) = endpoints("https://api.example.com/otlp/v1/traces").unwrap();
        assert_eq!(traces, "https://api.example.com/otlp/v1/traces");
        assert_eq!(metrics, "https://api.example.com/otlp/v1/metrics");
        assert!(endpoints("collector:4318").is_err());
        assert!(endpoints("ftp://collector").is_err());
    }

    #[test]
    fn the_environment_is_read_like_other_opentelemetry_sdks() {
        let env = |name: &str| match name {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://127.0.0.1:4318".to_owned()),
            "OTEL_EXPORTER_OTLP_HEADERS" => Some("x-api-key=s%3Dcret, team = a".to_owned()),
            "OTEL_SERVICE_NAME" => Some("triage".to_owned()),
            _ => None,
        };
        let telemetry = from_env(env).unwrap().unwrap();
        let shared = &telemetry.shared;
        assert_eq!(shared.headers["x-api-key"], "s=cret");
        assert_eq!(shared.headers["team"], "a");
        assert!(
            shared
                .resource
                .contains(&("service.name".to_owned(), Value::Text("triage".to_owned())))
        );
        assert!(
            !format!("{telemetry:?}").contains("cret"),
            "no secret in Debug"
        );
        assert!(from_env(|_| None).unwrap().is_none());
        let bad = |name: &str| (name == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "nope".to_owned());
        assert!(from_env(bad).is_err());
    }
}
