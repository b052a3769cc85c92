//! Finished spans as the exporter sends them.

use super::ids::{SpanId, TraceId};

/// An attribute value (the tracing field types that map onto OTLP's).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

/// A named attribute.
pub(crate) type Attribute = (String, Value);

/// OTLP span kinds this SDK uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpanKind {
    Internal = 1,
    Server = 2,
    Client = 3,
}

/// An event inside a span (a `tracing` event emitted while it was current).
#[derive(Debug, Clone)]
pub(crate) struct SpanEvent {
    pub(crate) unix_nanos: u64,
    pub(crate) name: String,
    pub(crate) attributes: Vec<Attribute>,
}

/// A link to a span in another trace (or another place in this one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SpanLink {
    pub(crate) trace: TraceId,
    pub(crate) span: SpanId,
}

/// A finished span, ready to export.
#[derive(Debug, Clone)]
pub(crate) struct FinishedSpan {
    pub(crate) trace: TraceId,
    pub(crate) span: SpanId,
    pub(crate) parent: Option<SpanId>,
    pub(crate) name: String,
    pub(crate) kind: SpanKind,
    pub(crate) start_unix_nanos: u64,
    pub(crate) end_unix_nanos: u64,
    pub(crate) attributes: Vec<Attribute>,
    pub(crate) events: Vec<SpanEvent>,
    pub(crate) links: Vec<SpanLink>,
    /// `Some(message)` marks the span as failed.
    pub(crate) error: Option<String>,
}

/// Nanoseconds since the Unix epoch now (`web_time`, so the Workers clock on wasm32).
#[allow(clippy::disallowed_methods)] // web_time's clock is the one that works on wasm32
pub(crate) fn unix_nanos_now() -> u64 {
    web_time::SystemTime::now()
        .duration_since(web_time::UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
