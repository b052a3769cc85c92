//! The `tracing` layer that turns the SDK's contract spans (and the spans inside them) into
//! OpenTelemetry spans with derived ids.

use std::fmt;
use std::sync::Arc;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::{LookupSpan, SpanRef};

use super::export::Exporter;
use super::ids::{self, SpanId, TraceId};
use super::record::{
    Attribute, FinishedSpan, SpanEvent, SpanKind, SpanLink, Value, unix_nanos_now,
};

/// Events kept per span; later ones are counted, not kept.
const MAX_EVENTS: usize = 32;

/// A [`Layer`] that exports the SDK's spans to OTLP. Made by
/// [`Telemetry::layer`](super::Telemetry::layer); see the [module docs](super).
pub struct TelemetryLayer {
    pub(super) shared: Arc<Exporter>,
}

impl fmt::Debug for TelemetryLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelemetryLayer").finish_non_exhaustive()
    }
}

/// What a tracked span is to the SDK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Dispatch,
    Step,
    Create,
    /// Any span opened inside a tracked one (the user's, or a library's).
    Inner,
}

/// A span being tracked, kept in its extensions.
#[derive(Debug)]
struct Tracked {
    role: Role,
    name: &'static str,
    trace: TraceId,
    /// Known at the start except for steps (their step id is recorded after the submit) and
    /// creations (the execution id comes back from the kernel).
    span: Option<SpanId>,
    parent: Option<SpanId>,
    /// Position among the parent's children, for ids that have nothing else to derive from.
    ordinal: u32,
    children: u32,
    fields: Vec<Attribute>,
    start: u64,
    events: Vec<SpanEvent>,
    links: Vec<SpanLink>,
}

impl Tracked {
    fn text(&self, name: &str) -> Option<&str> {
        text_field(&self.fields, name)
    }

    fn flag(&self, name: &str) -> bool {
        self.fields
            .iter()
            .any(|(key, value)| key == name && *value == Value::Bool(true))
    }

    /// This span's id, fixed from now on (a child is about to name it as its parent).
    fn span_id(&mut self) -> SpanId {
        let span = self.span.unwrap_or_else(|| self.natural_id());
        self.span = Some(span);
        span
    }

    /// The id a span gets unless something else fixed it: a step's is its step id's prefix
    /// (the one its `traceparent` names), a creation's comes from the execution id, and any
    /// other is derived from its parent and its position there.
    fn natural_id(&self) -> SpanId {
        let recorded = match self.role {
            Role::Step => self.text("step_id").and_then(ids::span_of_step),
            Role::Create => self.text("execution_id").map(ids::span_of_creation),
            Role::Dispatch | Role::Inner => None,
        };
        recorded.unwrap_or_else(|| {
            let parent = self.parent.unwrap_or_default();
            ids::derived_span(&[
                &parent,
                self.name.as_bytes(),
                &self.ordinal.to_be_bytes(),
                &self.trace,
            ])
        })
    }

    /// The id a closing span is exported with. A step keeps its step id's prefix only when it
    /// has a result (it ran, or replays the run that had one): a denial, a wait for approval
    /// or a stop is decided again on every delivery, so those get an id of their delivery's.
    fn final_id(&mut self) -> SpanId {
        if let Some(span) = self.span {
            return span;
        }
        let decided_per_delivery = self.role == Role::Step
            && !matches!(self.text("outcome"), Some("succeeded" | "failed"));
        match self.text("step_id") {
            Some(step_id) if decided_per_delivery => ids::derived_span(&[
                b"step",
                step_id.as_bytes(),
                &self.parent.unwrap_or_default(),
                &self.ordinal.to_be_bytes(),
            ]),
            _ => self.natural_id(),
        }
    }
}

/// The spans' [`Tracked`] state, one per exporter: several [`TelemetryLayer`]s (two backends)
/// can sit in one subscriber and share each span's extensions.
#[derive(Debug, Default)]
struct Tracks(Vec<(usize, Tracked)>);

impl Tracks {
    fn get_mut(&mut self, key: usize) -> Option<&mut Tracked> {
        self.0
            .iter_mut()
            .find(|(owner, _)| *owner == key)
            .map(|(_, tracked)| tracked)
    }

    fn take(&mut self, key: usize) -> Option<Tracked> {
        let index = self.0.iter().position(|(owner, _)| *owner == key)?;
        Some(self.0.swap_remove(index).1)
    }
}

/// Records a span's or an event's fields.
struct Fields<'a> {
    list: &'a mut Vec<Attribute>,
    message: Option<String>,
}

impl Fields<'_> {
    fn set(&mut self, field: &Field, value: Value) {
        let name = field.name();
        if name == "message" {
            if let Value::Text(text) = value {
                self.message = Some(text);
            }
            return;
        }
        match self.list.iter_mut().find(|(key, _)| key == name) {
            Some(slot) => slot.1 = value,
            None => self.list.push((name.to_owned(), value)),
        }
    }
}

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.set(field, Value::Text(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field, Value::Text(value.to_owned()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.set(field, Value::Int(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.set(field, Value::Int(i64::try_from(value).unwrap_or(i64::MAX)));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.set(field, Value::Float(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.set(field, Value::Bool(value));
    }
}

fn role_of(name: &str) -> Option<Role> {
    match name {
        crate::spans::DISPATCH => Some(Role::Dispatch),
        crate::spans::STEP => Some(Role::Step),
        crate::spans::CREATE => Some(Role::Create),
        _ => None,
    }
}

/// Where a new span goes: its trace, parent and position, and its links.
struct Place {
    trace: TraceId,
    parent: Option<SpanId>,
    ordinal: u32,
    links: Vec<SpanLink>,
}

fn text_field<'a>(fields: &'a [Attribute], name: &str) -> Option<&'a str> {
    fields.iter().find_map(|(key, value)| match value {
        Value::Text(text) if key == name => Some(text.as_str()),
        _ => None,
    })
}

fn int_field(fields: &[Attribute], name: &str) -> Option<i64> {
    fields.iter().find_map(|(key, value)| match value {
        Value::Int(int) if key == name => Some(*int),
        _ => None,
    })
}

/// The place of a new span, or `None` when it is not exported: neither one of the SDK's nor
/// inside one.
fn place(
    role: Option<Role>,
    adopted: Option<(TraceId, SpanId, u32)>,
    fields: &[Attribute],
) -> Option<Place> {
    let root = |links| {
        let trace = ids::trace_of_execution(text_field(fields, "execution_id")?);
        Some(Place {
            trace,
            parent: None,
            ordinal: 0,
            links,
        })
    };
    match (role, adopted) {
        // A creation belongs to the new execution's trace (known when it closes), linked to
        // where it was made.
        (Some(Role::Create), adopted) => {
            let mut links: Vec<SpanLink> = adopted
                .map(|(trace, span, _)| SpanLink { trace, span })
                .into_iter()
                .collect();
            let given = text_field(fields, "traceparent").and_then(link_of);
            links.extend(given.filter(|link| !links.contains(link)));
            Some(Place {
                trace: [0; 16],
                parent: None,
                ordinal: 0,
                links,
            })
        }
        // Each delivery is a root of the execution's trace.
        (Some(Role::Dispatch), _) => root(Vec::new()),
        (_, Some((trace, parent, ordinal))) => Some(Place {
            trace,
            parent: Some(parent),
            ordinal,
            links: Vec::new(),
        }),
        // A step outside any delivery (a test driving a context by hand).
        (Some(Role::Step), None) => root(Vec::new()),
        _ => None,
    }
}

/// The span a W3C `traceparent` names.
fn link_of(traceparent: &str) -> Option<SpanLink> {
    let mut parts = traceparent.split('-');
    let (_, trace, span) = (parts.next()?, parts.next()?, parts.next()?);
    let mut link = SpanLink {
        trace: [0; 16],
        span: [0; 8],
    };
    (ids::decode_hex(trace, &mut link.trace) && ids::decode_hex(span, &mut link.span))
        .then_some(link)
}

/// The nearest tracked ancestor's trace and span id, and this child's ordinal under it (spans
/// in between, below the exporter's level, are skipped over).
fn adopt<S>(parent: Option<SpanRef<'_, S>>, key: usize) -> Option<(TraceId, SpanId, u32)>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    parent?.scope().find_map(|ancestor| {
        let mut extensions = ancestor.extensions_mut();
        let tracked = extensions.get_mut::<Tracks>()?.get_mut(key)?;
        let ordinal = tracked.children;
        tracked.children += 1;
        Some((tracked.trace, tracked.span_id(), ordinal))
    })
}

impl<S> Layer<S> for TelemetryLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if *attrs.metadata().level() > self.shared.level {
            return;
        }
        let Some(span) = ctx.span(id) else { return };
        let name = span.name();
        let role = role_of(name);
        let adopted = adopt(span.parent(), self.key());
        let mut fields = Vec::new();
        attrs.record(&mut Fields {
            list: &mut fields,
            message: None,
        });
        let Some(place) = place(role, adopted, &fields) else {
            return;
        };
        let span_id = (role == Some(Role::Dispatch)).then(|| {
            let attempt = int_field(&fields, "attempt").and_then(|a| u64::try_from(a).ok());
            let dispatch = text_field(&fields, "dispatch_id").unwrap_or_default();
            ids::span_of_dispatch(dispatch, attempt.unwrap_or_default())
        });
        let tracked = Tracked {
            role: role.unwrap_or(Role::Inner),
            name,
            trace: place.trace,
            span: span_id,
            parent: place.parent,
            ordinal: place.ordinal,
            children: 0,
            fields,
            start: unix_nanos_now(),
            events: Vec::new(),
            links: place.links,
        };
        if tracked.role == Role::Dispatch {
            self.shared.with_metrics(|metrics| metrics.run_started());
        }
        let mut extensions = span.extensions_mut();
        match extensions.get_mut::<Tracks>() {
            Some(tracks) => tracks.0.push((self.key(), tracked)),
            None => extensions.insert(Tracks(vec![(self.key(), tracked)])),
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        if let Some(tracked) = extensions
            .get_mut::<Tracks>()
            .and_then(|t| t.get_mut(self.key()))
        {
            values.record(&mut Fields {
                list: &mut tracked.fields,
                message: None,
            });
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if *event.metadata().level() > self.shared.level {
            return;
        }
        let Some(span) = ctx.event_span(event) else {
            return;
        };
        // The nearest tracked span (the event's own may be below the level, or untracked).
        for ancestor in span.scope() {
            let mut extensions = ancestor.extensions_mut();
            if let Some(tracked) = extensions
                .get_mut::<Tracks>()
                .and_then(|t| t.get_mut(self.key()))
            {
                record_event(tracked, event);
                return;
            }
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let taken = span
            .extensions_mut()
            .get_mut::<Tracks>()
            .and_then(|t| t.take(self.key()));
        let Some(tracked) = taken else { return };
        let role = tracked.role;
        if let Some(finished) = self.finish(tracked) {
            self.shared.push(finished);
        }
        if matches!(role, Role::Dispatch | Role::Step) {
            super::handoff::span_closed(&self.shared, role == Role::Dispatch);
        }
    }
}

impl TelemetryLayer {
    /// Which exporter's state this layer keeps in a span's extensions.
    fn key(&self) -> usize {
        Arc::as_ptr(&self.shared) as usize
    }

    /// Turns a closed span into an exportable one, or `None` when it is not exported.
    fn finish(&self, mut tracked: Tracked) -> Option<FinishedSpan> {
        let end = unix_nanos_now();
        let millis = end.saturating_sub(tracked.start) as f64 / 1e6;
        let replayed = tracked.flag("replayed");
        let outcome = tracked.text("outcome").unwrap_or("unknown").to_owned();
        match tracked.role {
            Role::Dispatch => {
                let stop = tracked.text("stop").map(str::to_owned);
                self.shared
                    .with_metrics(|m| m.run_finished(&outcome, stop.as_deref()));
            }
            Role::Step => {
                let kind = tracked.text("kind").unwrap_or("unknown").to_owned();
                let attempts = int_field(&tracked.fields, "attempts").unwrap_or(1);
                self.shared.with_metrics(|m| {
                    m.step_attempts_finished(&kind, &outcome, replayed, attempts, millis);
                });
            }
            Role::Create => {
                let execution = tracked.text("execution_id")?;
                tracked.trace = ids::trace_of_execution(execution);
            }
            Role::Inner => {}
        }
        if tracked.role == Role::Step && replayed && !self.shared.export_replayed {
            return None;
        }
        let span = tracked.final_id();
        Some(FinishedSpan {
            trace: tracked.trace,
            span,
            parent: tracked.parent,
            name: display_name(&tracked),
            kind: kind_of(&tracked),
            start_unix_nanos: tracked.start,
            end_unix_nanos: end.max(tracked.start),
            error: error_of(&tracked),
            attributes: exported_attributes(&tracked),
            events: tracked.events,
            links: tracked.links,
        })
    }
}

/// Keeps `event` as one of `tracked`'s span events (up to [`MAX_EVENTS`]).
fn record_event(tracked: &mut Tracked, event: &Event<'_>) {
    if tracked.events.len() >= MAX_EVENTS {
        return;
    }
    let mut attributes = vec![(
        "level".to_owned(),
        Value::Text(event.metadata().level().to_string()),
    )];
    let mut fields = Fields {
        list: &mut attributes,
        message: None,
    };
    event.record(&mut fields);
    let name = fields
        .message
        .unwrap_or_else(|| event.metadata().name().to_owned());
    tracked.events.push(SpanEvent {
        unix_nanos: unix_nanos_now(),
        name,
        attributes,
    });
}

/// `tool_call send_email`, `dispatch triage`, `create triage`; other spans keep their name.
fn display_name(tracked: &Tracked) -> String {
    let field = |name| tracked.text(name).unwrap_or("?");
    match tracked.role {
        Role::Dispatch => format!("dispatch {}", field("agent_id")),
        Role::Step => format!("{} {}", field("kind"), field("target")),
        Role::Create => format!("create {}", field("agent_id")),
        Role::Inner => tracked.name.to_owned(),
    }
}

fn kind_of(tracked: &Tracked) -> SpanKind {
    match tracked.role {
        Role::Dispatch => SpanKind::Server,
        Role::Create => SpanKind::Client,
        Role::Step if tracked.text("kind") == Some("llm_call") => SpanKind::Client,
        Role::Step | Role::Inner => SpanKind::Internal,
    }
}

/// The failure a span ended with: a failed run, or a step that failed, was denied or errored.
fn error_of(tracked: &Tracked) -> Option<String> {
    let outcome = tracked.text("outcome")?;
    let failed = match tracked.role {
        Role::Dispatch => outcome == "failed",
        Role::Step => matches!(outcome, "failed" | "denied" | "error"),
        Role::Create | Role::Inner => false,
    };
    failed.then(|| tracked.text("failure_reason").unwrap_or(outcome).to_owned())
}

/// The contract's fields as `rebuno.<field>`, plus `rebuno.span`; other spans' fields as-is.
fn exported_attributes(tracked: &Tracked) -> Vec<Attribute> {
    if tracked.role == Role::Inner {
        return tracked.fields.clone();
    }
    let mut list = vec![(
        "rebuno.span".to_owned(),
        Value::Text(tracked.name.to_owned()),
    )];
    list.extend(
        tracked
            .fields
            .iter()
            .map(|(key, value)| (format!("rebuno.{key}"), value.clone())),
    );
    list
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEP_ID: &str = "66521f99aa0c6b1c9b5fd1c1e0b43e6f8ef7e77b3a3a2f4f5c1e6c1d2e3f4a5b";

    fn step(outcome: &str, parent: SpanId) -> Tracked {
        Tracked {
            role: Role::Step,
            name: crate::spans::STEP,
            trace: [1; 16],
            span: None,
            parent: Some(parent),
            ordinal: 0,
            children: 0,
            fields: vec![
                ("step_id".to_owned(), Value::Text(STEP_ID.to_owned())),
                ("outcome".to_owned(), Value::Text(outcome.to_owned())),
            ],
            start: 0,
            events: Vec::new(),
            links: Vec::new(),
        }
    }

    #[test]
    fn a_step_with_a_result_is_its_step_ids_prefix_on_every_delivery() {
        let prefix = ids::span_of_step(STEP_ID);
        assert_eq!(Some(step("succeeded", [2; 8]).final_id()), prefix);
        assert_eq!(Some(step("failed", [3; 8]).final_id()), prefix);
    }

    #[test]
    fn a_decision_made_again_per_delivery_gets_that_deliverys_id() {
        let first = step("denied", [2; 8]).final_id();
        let second = step("denied", [3; 8]).final_id();
        assert_ne!(first, second);
        assert_ne!(Some(first), ids::span_of_step(STEP_ID));
    }

    #[test]
    fn an_id_a_child_has_named_is_kept() {
        let mut stopped = step("stopped", [2; 8]);
        let named = stopped.span_id();
        assert_eq!(Some(named), ids::span_of_step(STEP_ID));
        assert_eq!(stopped.final_id(), named, "the child's parent must exist");
    }

    #[test]
    fn a_creation_links_to_the_given_traceparent_once() {
        let fields = vec![(
            "traceparent".to_owned(),
            Value::Text("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned()),
        )];
        let place = place(Some(Role::Create), None, &fields).unwrap();
        assert_eq!(place.links.len(), 1);
        let adopted = Some((place.links[0].trace, place.links[0].span, 0));
        let place = super::place(Some(Role::Create), adopted, &fields).unwrap();
        assert_eq!(place.links.len(), 1, "the same span is linked once");
        assert!(
            super::place(None, None, &fields).is_none(),
            "outside: not exported"
        );
    }
}
