//! OTLP/HTTP JSON bodies (`/v1/traces`, `/v1/metrics`), per the OTLP specification's JSON
//! encoding: ids as lowercase hex, enums as numbers, timestamps as decimal strings (past 2^53)
//! and every other integer as a JSON number. proto3 JSON allows either form for a 64-bit
//! integer, but not every receiver reads both: rotel 0.0.1a15 silently drops a data point's
//! string `asInt`, and a whole histogram whose counts are strings.

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::{Value as Json, json};

use super::ids::to_hex;
use super::metrics::{Histogram, LATENCY_BOUNDS_MS, Metrics, SeriesKey};
use super::record::{Attribute, FinishedSpan, SpanEvent, SpanLink, Value};

/// The instrumentation scope every span and metric is reported under.
fn scope() -> Json {
    json!({ "name": "rebuno", "version": env!("CARGO_PKG_VERSION") })
}

fn any_value(value: &Value) -> Json {
    match value {
        Value::Text(text) => json!({ "stringValue": text }),
        Value::Int(int) => json!({ "intValue": int }),
        Value::Float(float) => json!({ "doubleValue": float }),
        Value::Bool(flag) => json!({ "boolValue": flag }),
    }
}

fn attributes(list: &[Attribute]) -> Json {
    Json::Array(
        list.iter()
            .map(|(key, value)| json!({ "key": key, "value": any_value(value) }))
            .collect(),
    )
}

fn resource(list: &[Attribute]) -> Json {
    json!({ "attributes": attributes(list) })
}

/// A span as OTLP JSON, written straight to the output (no intermediate `serde_json::Value`
/// tree: building one cost ~60k instructions a span, most of the exporter's CPU).
struct SpanJson<'a>(&'a FinishedSpan);

/// Attributes as OTLP `KeyValue`s.
struct Attributes<'a>(&'a [Attribute]);

/// One `KeyValue`.
struct KeyValue<'a>(&'a str, &'a Value);

/// An `AnyValue`.
struct AnyValue<'a>(&'a Value);

/// A decimal string (64-bit timestamps exceed what JSON numbers keep exactly in JavaScript).
struct Decimal(u64);

impl Serialize for Decimal {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

impl Serialize for AnyValue<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        match self.0 {
            Value::Text(text) => map.serialize_entry("stringValue", text)?,
            Value::Int(int) => map.serialize_entry("intValue", int)?,
            Value::Float(float) => map.serialize_entry("doubleValue", float)?,
            Value::Bool(flag) => map.serialize_entry("boolValue", flag)?,
        }
        map.end()
    }
}

impl Serialize for KeyValue<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("key", self.0)?;
        map.serialize_entry("value", &AnyValue(self.1))?;
        map.end()
    }
}

impl Serialize for Attributes<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|(key, value)| KeyValue(key, value)))
    }
}

struct EventJson<'a>(&'a SpanEvent);

impl Serialize for EventJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("timeUnixNano", &Decimal(self.0.unix_nanos))?;
        map.serialize_entry("name", &self.0.name)?;
        map.serialize_entry("attributes", &Attributes(&self.0.attributes))?;
        map.end()
    }
}

struct LinkJson<'a>(&'a SpanLink);

impl Serialize for LinkJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("traceId", &to_hex(&self.0.trace))?;
        map.serialize_entry("spanId", &to_hex(&self.0.span))?;
        map.end()
    }
}

struct Status<'a>(Option<&'a str>);

impl Serialize for Status<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        match self.0 {
            Some(message) => {
                map.serialize_entry("code", &2)?;
                map.serialize_entry("message", message)?;
            }
            None => map.serialize_entry("code", &0)?,
        }
        map.end()
    }
}

impl Serialize for SpanJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let span = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("traceId", &to_hex(&span.trace))?;
        map.serialize_entry("spanId", &to_hex(&span.span))?;
        if let Some(parent) = &span.parent {
            map.serialize_entry("parentSpanId", &to_hex(parent))?;
        }
        map.serialize_entry("name", &span.name)?;
        map.serialize_entry("kind", &(span.kind as i32))?;
        map.serialize_entry("startTimeUnixNano", &Decimal(span.start_unix_nanos))?;
        map.serialize_entry("endTimeUnixNano", &Decimal(span.end_unix_nanos))?;
        map.serialize_entry("attributes", &Attributes(&span.attributes))?;
        map.serialize_entry(
            "events",
            &Seq(span.events.iter().map(EventJson).collect::<Vec<_>>()),
        )?;
        map.serialize_entry(
            "links",
            &Seq(span.links.iter().map(LinkJson).collect::<Vec<_>>()),
        )?;
        map.serialize_entry("status", &Status(span.error.as_deref()))?;
        map.end()
    }
}

/// A list of serializable items.
struct Seq<T>(Vec<T>);

impl<T: Serialize> Serialize for Seq<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(&self.0)
    }
}

/// The scope every span is reported under.
struct ScopeJson;

impl Serialize for ScopeJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("name", "rebuno")?;
        map.serialize_entry("version", env!("CARGO_PKG_VERSION"))?;
        map.end()
    }
}

/// An `ExportTraceServiceRequest` carrying `spans`, as JSON bytes.
pub(crate) fn traces(
    resource_attributes: &[Attribute],
    spans: &[FinishedSpan],
) -> serde_json::Result<Vec<u8>> {
    struct Body<'a>(&'a [Attribute], &'a [FinishedSpan]);
    struct Resource<'a>(&'a [Attribute]);
    struct Scoped<'a>(&'a [FinishedSpan]);
    struct ResourceSpans<'a>(&'a Body<'a>);
    impl Serialize for Resource<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let mut map = serializer.serialize_map(Some(1))?;
            map.serialize_entry("attributes", &Attributes(self.0))?;
            map.end()
        }
    }
    impl Serialize for Scoped<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let mut map = serializer.serialize_map(Some(2))?;
            map.serialize_entry("scope", &ScopeJson)?;
            map.serialize_entry("spans", &Seq(self.0.iter().map(SpanJson).collect()))?;
            map.end()
        }
    }
    impl Serialize for ResourceSpans<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let mut map = serializer.serialize_map(Some(2))?;
            map.serialize_entry("resource", &Resource(self.0.0))?;
            map.serialize_entry("scopeSpans", &[Scoped(self.0.1)])?;
            map.end()
        }
    }
    impl Serialize for Body<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let mut map = serializer.serialize_map(Some(1))?;
            map.serialize_entry("resourceSpans", &[ResourceSpans(self)])?;
            map.end()
        }
    }
    serde_json::to_vec(&Body(resource_attributes, spans))
}

fn series_attributes(key: &SeriesKey) -> Json {
    let list: Vec<Attribute> = key
        .iter()
        .map(|(name, value)| (format!("rebuno.{name}"), Value::Text(value.clone())))
        .collect();
    attributes(&list)
}

struct Times {
    start: String,
    now: String,
}

fn counter<'a>(
    name: &str,
    unit: &str,
    description: &str,
    monotonic: bool,
    points: impl Iterator<Item = (Option<&'a SeriesKey>, i64)>,
    times: &Times,
) -> Json {
    let points: Vec<Json> = points
        .map(|(key, value)| {
            json!({
                "attributes": key.map(series_attributes).unwrap_or_else(|| json!([])),
                "startTimeUnixNano": times.start,
                "timeUnixNano": times.now,
                "asInt": value,
            })
        })
        .collect();
    json!({
        "name": name, "unit": unit, "description": description,
        "sum": { "aggregationTemporality": 2, "isMonotonic": monotonic, "dataPoints": points },
    })
}

fn histogram<'a>(
    name: &str,
    description: &str,
    points: impl Iterator<Item = (Option<&'a SeriesKey>, &'a Histogram)>,
    times: &Times,
) -> Json {
    let points: Vec<Json> = points
        .filter(|(_, histogram)| histogram.count > 0)
        .map(|(key, histogram)| {
            json!({
                "attributes": key.map(series_attributes).unwrap_or_else(|| json!([])),
                "startTimeUnixNano": times.start,
                "timeUnixNano": times.now,
                "count": histogram.count,
                "sum": histogram.sum,
                "bucketCounts": histogram.counts,
                "explicitBounds": LATENCY_BOUNDS_MS,
            })
        })
        .collect();
    json!({
        "name": name, "unit": "ms", "description": description,
        "histogram": { "aggregationTemporality": 2, "dataPoints": points },
    })
}

fn as_int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// An `ExportMetricsServiceRequest` with every metric's cumulative value at `now`.
pub(crate) fn metrics(resource_attributes: &[Attribute], metrics: &Metrics, now: u64) -> Json {
    let times = Times {
        start: metrics.start_unix_nanos.to_string(),
        now: now.to_string(),
    };
    let mut list = work_counters(metrics, &times);
    list.extend(latency_histograms(metrics, &times));
    list.extend(retry_and_drop_counters(metrics, &times));
    json!({ "resourceMetrics": [{
        "resource": resource(resource_attributes),
        "scopeMetrics": [{ "scope": scope(), "metrics": list }],
    }]})
}

/// The work done: dispatch runs in progress and finished, and durable calls finished.
fn work_counters(metrics: &Metrics, times: &Times) -> Vec<Json> {
    vec![
        counter(
            "rebuno.runs.in_flight",
            "{run}",
            "Dispatch runs in progress in this process.",
            false,
            std::iter::once((None, metrics.runs_in_flight)),
            times,
        ),
        counter(
            "rebuno.dispatches",
            "{run}",
            "Dispatch runs finished, by outcome (and stop).",
            true,
            metrics
                .dispatches
                .iter()
                .map(|(k, v)| (Some(k), as_int(*v))),
            times,
        ),
        counter(
            "rebuno.steps",
            "{step}",
            "Durable calls finished, by kind, outcome and whether they replayed.",
            true,
            metrics.steps.iter().map(|(k, v)| (Some(k), as_int(*v))),
            times,
        ),
    ]
}

/// How long durable calls and acknowledgements took.
fn latency_histograms(metrics: &Metrics, times: &Times) -> Vec<Json> {
    vec![
        histogram(
            "rebuno.step.duration",
            "Durable calls' wall time, by kind and whether they replayed.",
            metrics.step_duration.iter().map(|(k, h)| (Some(k), h)),
            times,
        ),
        histogram(
            "rebuno.ack.duration",
            "From a dispatch's arrival to its acknowledgement.",
            std::iter::once((None, &metrics.ack_duration)),
            times,
        ),
    ]
}

/// What went wrong on the way: kernel requests sent again, spans dropped.
fn retry_and_drop_counters(metrics: &Metrics, times: &Times) -> Vec<Json> {
    vec![
        counter(
            "rebuno.kernel.retries",
            "{request}",
            "Kernel requests sent again after a failure.",
            true,
            std::iter::once((None, as_int(metrics.kernel_retries))),
            times,
        ),
        counter(
            "rebuno.telemetry.dropped_spans",
            "{span}",
            "Spans dropped because the export buffer was full.",
            true,
            std::iter::once((None, as_int(metrics.dropped_spans))),
            times,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::record::SpanKind;
    use super::*;

    #[test]
    fn a_span_is_written_with_hex_ids_and_string_times() {
        let finished = FinishedSpan {
            trace: [1; 16],
            span: [2; 8],
            parent: Some([3; 8]),
            name: "tool_call send".to_owned(),
            kind: SpanKind::Internal,
            start_unix_nanos: 5,
            end_unix_nanos: 9,
            attributes: vec![("rebuno.replayed".to_owned(), Value::Bool(false))],
            events: Vec::new(),
            links: vec![SpanLink {
                trace: [4; 16],
                span: [5; 8],
            }],
            error: Some("boom".to_owned()),
        };
        let bytes = traces(&[], &[finished]).unwrap();
        let body: Json = serde_json::from_slice(&bytes).unwrap();
        let span = &body["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert_eq!(span["traceId"], "01010101010101010101010101010101");
        assert_eq!(span["parentSpanId"], "0303030303030303");
        assert_eq!(span["startTimeUnixNano"], "5");
        assert_eq!(span["status"]["code"], 2);
        assert_eq!(span["links"][0]["spanId"], "0505050505050505");
        assert_eq!(span["attributes"][0]["value"]["boolValue"], false);
    }

    #[test]
    fn metrics_are_cumulative_sums_and_histograms() {
        let mut data = Metrics::new(1);
        data.step_finished("local", "succeeded", false, 2.0);
        let body = metrics(&[], &data, 7);
        let list = &body["resourceMetrics"][0]["scopeMetrics"][0]["metrics"];
        let steps = list
            .as_array()
            .and_then(|all| all.iter().find(|m| m["name"] == "rebuno.steps"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(steps["sum"]["isMonotonic"], true);
        assert_eq!(steps["sum"]["dataPoints"][0]["asInt"], 1);
        assert_eq!(steps["sum"]["dataPoints"][0]["startTimeUnixNano"], "1");
    }
}
