//! [`init_logging`]: the one line that makes the SDK's logs reach the Workers console
//! (`wrangler tail`, the dashboard's logs, `wrangler dev`'s terminal).

// Only the wasm32 functions use the layer; it is compiled everywhere so its tests run on the host.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber, span};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// The Worker variable read as the log filter, as `RUST_LOG` is on other hosts (there is no
/// process environment on Workers): `[vars] RUST_LOG = "rebuno=debug,info"` in `wrangler.toml`.
pub const LOG_VAR: &str = "RUST_LOG";

/// Installs a log subscriber for the isolate: the `tracing` events of the SDK and of your code
/// as lines in the Workers console (`console.error`, `console.warn`, `console.log` and
/// `console.debug` by level), filtered by the Worker variable [`RUST_LOG`](LOG_VAR), `info`
/// when it is unset.
///
/// The SDK logs through `tracing` and, being a library, never installs a subscriber itself:
/// without one, a wrong secret or an unreachable kernel shows nothing in `wrangler tail`. Call
/// this on the isolate's first request, before the agent's first run. Calling it again does
/// nothing, and so does a first call when the isolate already has a global subscriber (one
/// exporting over OTLP, say: add [`console_layer`] to that one instead).
///
/// `RUST_LOG` is read as a list of `target=level` directives (`info`, `rebuno=debug,warn`),
/// without `EnvFilter`'s span and field filters, whose regex engine would make the wasm much
/// bigger; a value that is not such a list logs `info` and says so.
///
/// ```ignore
/// use rebuno::HandlerError;
///
/// fn agent(env: &worker::Env) -> rebuno::Result<rebuno::Agent> {
///     rebuno_workers::init_logging(env); // the var RUST_LOG, info by default
///     rebuno_workers::agent_builder("hello", env)
///         .handler(|name: String| async move { Ok::<_, HandlerError>(format!("hello, {name}")) })
///         .build()
/// }
/// ```
#[cfg(target_arch = "wasm32")]
pub fn init_logging(env: &worker::Env) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use tracing_subscriber::layer::SubscriberExt as _;

    static TRIED: AtomicBool = AtomicBool::new(false);
    if TRIED.swap(true, Ordering::AcqRel) {
        return;
    }
    let subscriber = tracing_subscriber::registry().with(console_layer(env));
    // Err only when a global subscriber is already set: that one stays, as documented.
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// The layer [`init_logging`] installs, filtered by the Worker variable
/// [`RUST_LOG`](LOG_VAR) (`info` when unset), to add to a subscriber of your own, for example
/// one with `rebuno::telemetry`'s OTLP layer:
///
/// ```ignore
/// use tracing_subscriber::layer::SubscriberExt as _;
/// let subscriber = tracing_subscriber::registry()
///     .with(rebuno_workers::console_layer(&env))
///     .with(telemetry.layer());
/// tracing::subscriber::set_global_default(subscriber).ok();
/// ```
#[cfg(target_arch = "wasm32")]
pub fn console_layer<S>(env: &worker::Env) -> impl Layer<S> + Send + Sync + 'static
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let value = env.var(LOG_VAR).ok().map(|value| value.to_string());
    let (targets, rejected) = filter(value.as_deref());
    if let Some(value) = rejected {
        worker::console_warn!(
            "WARN rebuno_workers: {LOG_VAR}={value:?} is not a list of target=level directives \
             (e.g. `info` or `rebuno=debug,warn`); logging at info"
        );
    }
    ConsoleLayer { write: to_console }.with_filter(targets)
}

/// One line to the console method of its level.
#[cfg(target_arch = "wasm32")]
fn to_console(level: Level, line: &str) {
    match level {
        Level::ERROR => worker::console_error!("{line}"),
        Level::WARN => worker::console_warn!("{line}"),
        Level::INFO => worker::console_log!("{line}"),
        _ => worker::console_debug!("{line}"),
    }
}

/// The filter: `value` as `target=level` directives, `info` when unset or empty, and `value`
/// itself when it does not parse (then `info` too).
fn filter(value: Option<&str>) -> (Targets, Option<String>) {
    let info = || Targets::new().with_default(LevelFilter::INFO);
    match value.map(str::trim).filter(|value| !value.is_empty()) {
        None => (info(), None),
        Some(value) => match value.parse::<Targets>() {
            Ok(targets) => (targets, None),
            Err(_) => (info(), Some(value.to_owned())),
        },
    }
}

/// Writes each event as one line, `LEVEL span{fields}: target: message fields`, as
/// `tracing_subscriber::fmt` would without its timestamp (the console stamps each line).
struct ConsoleLayer {
    write: fn(Level, &str),
}

impl<S> Layer<S> for ConsoleLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            let mut fields = SpanFields::default();
            attrs.record(&mut fields);
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(fields) = span.extensions_mut().get_mut::<SpanFields>()
        {
            values.record(fields);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let metadata = event.metadata();
        let mut line = format!("{} ", metadata.level());
        for span in ctx
            .event_scope(event)
            .into_iter()
            .flat_map(|scope| scope.from_root())
        {
            let _ = write!(line, "{}", span.name());
            if let Some(fields) = span.extensions().get::<SpanFields>()
                && !fields.0.text.is_empty()
            {
                let _ = write!(line, "{{{}}}", fields.0.text);
            }
            line.push_str(": ");
        }
        let mut fields = EventFields::default();
        event.record(&mut fields);
        let _ = write!(line, "{}: {}", metadata.target(), fields.message);
        if !fields.rest.text.is_empty() {
            let _ = write!(line, " {}", fields.rest.text);
        }
        (self.write)(*metadata.level(), &line);
    }
}

/// `name=value` pairs separated by spaces; strings without quotes.
#[derive(Default)]
struct Pairs {
    text: String,
}

impl Pairs {
    fn push(&mut self, field: &Field, value: fmt::Arguments<'_>) {
        if !self.text.is_empty() {
            self.text.push(' ');
        }
        let _ = write!(self.text, "{}={value}", field.name());
    }
}

/// A span's fields, kept in its extensions for the lines of the events inside it.
#[derive(Default)]
struct SpanFields(Pairs);

impl Visit for SpanFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push(field, format_args!("{value}"));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.push(field, format_args!("{value:?}"));
    }
}

/// An event's message and its other fields.
#[derive(Default)]
struct EventFields {
    message: String,
    rest: Pairs,
}

impl Visit for EventFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            self.rest.push(field, format_args!("{value}"));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            self.rest.push(field, format_args!("{value:?}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    thread_local! {
        static LINES: RefCell<Vec<(Level, String)>> = const { RefCell::new(Vec::new()) };
    }

    fn capture(level: Level, line: &str) {
        LINES.with(|lines| lines.borrow_mut().push((level, line.to_owned())));
    }

    /// Logs a few events under `value` as `RUST_LOG`, and returns the lines written.
    fn logged(value: Option<&str>) -> Vec<(Level, String)> {
        LINES.with(|lines| lines.borrow_mut().clear());
        let (targets, _) = filter(value);
        let layer = ConsoleLayer { write: capture }.with_filter(targets);
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("rebuno.dispatch", execution_id = "e-1", attempt = 2);
            let _entered = span.enter();
            tracing::debug!(target: "rebuno", "a debug line");
            tracing::info!(target: "rebuno", status = ?Some(1), "run started");
            tracing::warn!(target: "rebuno_workers", agent_id = "hello", "a warn line");
        });
        LINES.with(|lines| lines.borrow().clone())
    }

    #[test]
    fn lines_say_level_spans_target_message_and_fields() {
        let lines = logged(None);
        assert_eq!(
            lines,
            [
                (
                    Level::INFO,
                    "INFO rebuno.dispatch{execution_id=e-1 attempt=2}: rebuno: run started \
                     status=Some(1)"
                        .to_owned()
                ),
                (
                    Level::WARN,
                    "WARN rebuno.dispatch{execution_id=e-1 attempt=2}: rebuno_workers: a warn \
                     line agent_id=hello"
                        .to_owned()
                ),
            ]
        );
    }

    #[test]
    fn info_by_default_and_rust_log_when_set() {
        let levels = |value| {
            logged(value)
                .into_iter()
                .map(|(level, _)| level)
                .collect::<Vec<_>>()
        };
        assert_eq!(levels(Some("")), [Level::INFO, Level::WARN]);
        assert_eq!(levels(Some("warn")), [Level::WARN]);
        assert_eq!(
            levels(Some("rebuno=debug,warn")),
            [Level::DEBUG, Level::INFO, Level::WARN]
        );
    }

    #[test]
    fn a_value_that_does_not_parse_logs_info_and_is_named() {
        let (_, rejected) = filter(Some("rebuno[span{x=1}]=debug"));
        assert_eq!(rejected.as_deref(), Some("rebuno[span{x=1}]=debug"));
        assert_eq!(logged(Some("rebuno[span{x=1}]=debug")).len(), 2);
    }
}
