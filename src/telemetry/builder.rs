//! What a user configures: the [`TelemetryBuilder`], set in code or from the standard `OTEL_*`
//! variables, checked and turned into an exporter.

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use sha2::{Digest, Sha256};

use super::export::Exporter;
use super::metrics::Metrics;
use super::record::{Attribute, Value, unix_nanos_now};
use super::{Telemetry, config, handoff};
use crate::error::Result;
use crate::transport::SharedTransport;

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
        let transport = self.transport.map_or_else(default_transport, Ok)?;
        let start = unix_nanos_now();
        let text = |key: &str, value: &str| (key.to_owned(), Value::Text(value.to_owned()));
        let service = self.service_name.as_deref();
        let mut resource = vec![
            text("service.name", service.unwrap_or("unknown_service:rebuno")),
            text("service.instance.id", &instance_id(start)),
            text("telemetry.sdk.name", "rebuno"),
            text("telemetry.sdk.language", "rust"),
            text("telemetry.sdk.version", env!("CARGO_PKG_VERSION")),
        ];
        resource.extend(self.resource);
        let shared = Arc::new(Exporter {
            traces_url,
            metrics_url: self.metrics.then_some(metrics_url),
            headers,
            transport,
            timeout: self.timeout,
            resource,
            export_replayed: self.export_replayed,
            metrics_interval: self.metrics_interval,
            export_interval: self.export_interval,
            export_scheduled: AtomicBool::new(false),
            level: self.level,
            max_buffered: self.max_buffered,
            pending: Mutex::new(VecDeque::new()),
            metrics: Mutex::new(Metrics::new(start)),
            flight: futures_util::lock::Mutex::new(()),
        });
        handoff::register(&shared);
        Ok(Telemetry { shared })
    }
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
    let none = || config("no HTTP client compiled in for telemetry: pass one with .transport()");
    crate::transport::default_transport(crate::transport::Peer::Provider)
        .ok_or_else(none)?
        .map_err(|error| config("could not create the telemetry HTTP client").with_source(error))
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

/// A builder configured from `OTEL_*` variables read through `var`; `None` with no endpoint.
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
    for (key, value) in pairs(&var, "OTEL_RESOURCE_ATTRIBUTES")? {
        builder = builder.resource_attribute(key, value);
    }
    for (key, value) in pairs(&var, "OTEL_EXPORTER_OTLP_HEADERS")? {
        builder = builder.header(key, value);
    }
    Ok(Some(builder))
}

/// The variable `name` as `k1=v1,k2=v2` with percent-encoded values, as the OpenTelemetry
/// variables write them.
fn pairs(var: impl Fn(&str) -> Option<String>, name: &str) -> Result<Vec<(String, String)>> {
    let Some(text) = var(name) else {
        return Ok(Vec::new());
    };
    text.split(',')
        .filter(|pair| !pair.trim().is_empty())
        .map(|pair| {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| config(format!("{name}: an entry has no `=`")))?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let telemetry = from_vars(env).unwrap().unwrap().build().unwrap();
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
        assert!(from_vars(|_| None).unwrap().is_none());
        let bad = |name: &str| (name == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "nope".to_owned());
        assert!(from_vars(bad).unwrap().unwrap().build().is_err());
    }
}
