//! OpenTelemetry export (feature `opentelemetry`): the [span contract](crate::spans) as OTLP
//! traces and metrics, one trace per execution on every host and across every re-delivery.
//!
//! Build a [`Telemetry`] pointed at an OTLP/HTTP endpoint (a collector, Jaeger, Tempo,
//! Honeycomb…), add its [`layer`](Telemetry::layer) to your `tracing` subscriber, and serve the
//! agent as usual:
//!
//! ```no_run
//! use tracing_subscriber::prelude::*;
//!
//! # fn main() -> rebuno::Result<()> {
//! let telemetry = rebuno::telemetry::Telemetry::otlp("http://127.0.0.1:4318")
//!     .service_name("triage-agent")
//!     .build()?;
//! tracing_subscriber::registry()
//!     .with(telemetry.layer())
//!     // Filter the console per layer, so it cannot hide the SDK's spans from the exporter.
//!     .with(tracing_subscriber::fmt::layer().with_filter(tracing_subscriber::filter::LevelFilter::WARN))
//!     .init();
//! # Ok(()) }
//! ```
//!
//! # Ids: one trace per execution, with no trace context in the kernel
//!
//! - The **trace id** is the execution id: a UUID is 128 bits, so every dispatch of an
//!   execution, on any Lambda sandbox or Worker isolate, lands in the same trace, and a trace
//!   is found by execution id. (A non-UUID id is hashed.)
//! - A **step's span id** is the first 8 bytes of its step id, the one its outgoing
//!   [`traceparent`](crate::spans::traceparent) names: a provider's span is the step's child.
//!   A step decided again on every delivery (a denial, a wait for approval, a stop before it
//!   ran) gets an id of that delivery's instead, so a trace never holds one span id twice.
//! - A **delivery's span id** is derived from its dispatch id and attempt, and every span
//!   opened inside a step or a delivery (yours too) gets an id derived from its parent's and
//!   its position, so a rerun of the same code gives the same ids.
//! - A **creation** ([`Client::create`](crate::client::Client::create) inside a traced span, a
//!   subagent for instance) is a span of the *new* execution's trace, linked to the span it
//!   was made from.
//!
//! Several exporters (two backends) can sit in one subscriber. With `tracing-opentelemetry`
//! in the same subscriber, filter the `rebuno.*` spans out of it, or each comes twice, the
//! second time with random ids in a trace of its own.
//!
//! # Replays are not exported
//!
//! A re-delivery re-runs the handler and the kernel answers the recorded steps from its log:
//! those step spans (`replayed = true`) are dropped, so a crashed and re-delivered execution
//! shows each live step once, under the delivery that ran it.
//! [`export_replayed`](TelemetryBuilder::export_replayed) keeps them (same span ids as the
//! first run, marked `rebuno.replayed = true`).
//!
//! # Exported before the host stops
//!
//! Every acknowledged run flushes what is buffered as its last act, inside the background
//! task the host already keeps alive: within the held Lambda invocation (bounded by the
//! invocation's deadline), within `ctx.wait_until` on Workers, and within rebuno-hyper's
//! drain on shutdown. Concurrent runs share one export at a time. While a run goes on, its
//! finished steps are sent within [`export_interval`](TelemetryBuilder::export_interval)
//! (2 s), so a process killed mid-run loses at most that much: the re-delivery replays those
//! steps, and their live spans are already in the trace. Spans made outside a run
//! (a client creating executions) are sent by [`Telemetry::flush`].
//!
//! # Spans
//!
//! | span | OTLP name | kind | attributes |
//! |---|---|---|---|
//! | `rebuno.dispatch` | `dispatch <agent_id>` | server | `rebuno.<field>` for each field of the contract; status error when `failed` |
//! | `rebuno.step` | `<kind> <target>` (`tool_call send_email`) | internal (`llm_call`: client) | as above; status error when `failed`, `denied` or `error` |
//! | `rebuno.create` | `create <agent_id>` | client | `rebuno.agent_id`, `rebuno.execution_id` |
//! | any span inside those | its name | internal | its fields as they are |
//!
//! `tracing` events inside an exported span become its span events (at most 32 per span).
//! Spans and events more verbose than [`level`](TelemetryBuilder::level) (default `INFO`) are
//! left out, whatever the subscriber's other layers let through: HTTP clients log every pooled
//! connection at `DEBUG`/`TRACE`.
//!
//! # Metrics
//!
//! Sent to `/v1/metrics` with the spans, at most every
//! [`metrics_interval`](TelemetryBuilder::metrics_interval) (10 s) from runs' own flushes,
//! cumulative from the process's start (each process is one series: `service.instance.id`):
//!
//! | metric | type | attributes |
//! |---|---|---|
//! | `rebuno.runs.in_flight` | up-down sum | |
//! | `rebuno.dispatches` | sum | `rebuno.outcome`, `rebuno.stop` |
//! | `rebuno.steps` | sum | `rebuno.kind`, `rebuno.outcome`, `rebuno.replayed` (the replayed share is `replayed = true` over all) |
//! | `rebuno.step.duration` | histogram, ms | `rebuno.kind`, `rebuno.replayed` |
//! | `rebuno.ack.duration` | histogram, ms | |
//! | `rebuno.kernel.retries` | sum | |
//! | `rebuno.telemetry.dropped_spans` | sum | |

mod builder;
mod export;
pub(crate) mod handoff;
mod ids;
mod layer;
mod metrics;
mod otlp;
mod record;

use std::fmt;
use std::sync::Arc;

pub use builder::TelemetryBuilder;
pub use layer::TelemetryLayer;

use crate::error::{Error, ErrorKind, Result};
use export::Exporter;

/// An OTLP exporter of the SDK's spans and metrics. Cheap to clone; see the [module
/// docs](self).
#[derive(Clone)]
pub struct Telemetry {
    shared: Arc<Exporter>,
}

impl Telemetry {
    /// Starts an exporter to the OTLP/HTTP endpoint `endpoint` (`http://collector:4318`;
    /// `/v1/traces` and `/v1/metrics` are appended unless it already ends in `/v1/traces`).
    pub fn otlp(endpoint: impl Into<String>) -> TelemetryBuilder {
        TelemetryBuilder::new(endpoint.into())
    }

    /// An exporter configured from the standard variables: `OTEL_EXPORTER_OTLP_ENDPOINT` (or
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), `OTEL_EXPORTER_OTLP_HEADERS`,
    /// `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`. `None` when no endpoint is set
    /// (or on wasm32, which has no environment: use [`from_vars`](Self::from_vars)).
    ///
    /// # Errors
    ///
    /// `config` when a variable does not parse.
    pub fn from_env() -> Result<Option<Self>> {
        let builder = builder::from_vars(|name| std::env::var(name).ok())?;
        builder.map(TelemetryBuilder::build).transpose()
    }

    /// A builder configured from the same `OTEL_*` variables, read through `var`: the
    /// Workers vars of an `Env`, say, where there is no process environment. `None` when no
    /// endpoint is set.
    ///
    /// ```no_run
    /// # fn demo(vars: std::collections::HashMap<String, String>) -> rebuno::Result<()> {
    /// if let Some(builder) = rebuno::telemetry::Telemetry::from_vars(|name| vars.get(name).cloned())? {
    ///     let telemetry = builder.build()?; // on Workers: .transport(FetchTransport::new()) first
    /// #   drop(telemetry);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `config` when a variable does not parse.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<TelemetryBuilder>> {
        builder::from_vars(var)
    }

    /// The [`tracing_subscriber::Layer`] that feeds this exporter.
    pub fn layer(&self) -> TelemetryLayer {
        TelemetryLayer {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Sends everything buffered now (spans, and metrics when they changed), waiting for an
    /// export already under way first. Bounded by the builder's
    /// [`timeout`](TelemetryBuilder::timeout).
    ///
    /// # Errors
    ///
    /// `network` or `timeout` when the endpoint cannot be reached, `protocol` when it
    /// refuses the export. Spans the endpoint did not get, or asked to have again (429, 502,
    /// 503, 504), stay buffered for the next flush, up to
    /// [`max_buffered_spans`](TelemetryBuilder::max_buffered_spans); a batch it refused
    /// (400) is dropped, counted in `rebuno.telemetry.dropped_spans`.
    pub async fn flush(&self) -> Result<()> {
        self.shared.flush_within(self.shared.timeout, true).await
    }

    /// Spans waiting for the next flush.
    pub fn buffered_spans(&self) -> usize {
        self.shared.lock_pending().len()
    }
}

impl fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Header values (API keys) are never printed.
        f.debug_struct("Telemetry")
            .field("traces_url", &self.shared.traces_url)
            .field("headers", &self.shared.headers.keys().collect::<Vec<_>>())
            .field("export_replayed", &self.shared.export_replayed)
            .finish_non_exhaustive()
    }
}

/// A `config` error about the telemetry settings.
fn config(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Config, message)
}
