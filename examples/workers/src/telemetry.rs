//! OTLP export of the runs (the crate's `otel` feature): when the var
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, the isolate's first request builds a
//! [`rebuno::telemetry::Telemetry`] that posts over the Workers fetch and installs one global
//! subscriber with its layer and `rebuno_workers::console_layer` (the logs, in the console).
//! Each acknowledged run then exports its spans and metrics as the last act of the task it
//! hands to `ctx.wait_until`, before its deadline: nothing waits for a later request.

use std::cell::Cell;

use rebuno::telemetry::Telemetry;
use tracing_subscriber::layer::SubscriberExt as _;
use worker::Env;

/// The collector's OTLP/HTTP endpoint (`http://collector:4318`): a var, as there is no process
/// environment on wasm32.
const ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// `service.name` of the exported resource (a var, default [`DEFAULT_SERVICE_NAME`]); the other
/// `OTEL_*` variables (`OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_RESOURCE_ATTRIBUTES`) are read too.
const SERVICE_NAME_VAR: &str = "OTEL_SERVICE_NAME";
const DEFAULT_SERVICE_NAME: &str = "workers-example";

thread_local! {
    // Set once the isolate has looked at its vars: one exporter and one subscriber per isolate.
    static INSTALLED: Cell<bool> = const { Cell::new(false) };
}

/// Installs the exporter on the isolate's first request, when the endpoint var is set. A bad
/// endpoint is logged, not raised: the agent serves its webhooks without telemetry.
pub(crate) fn install(env: &Env) {
    if INSTALLED.with(|installed| installed.replace(true)) {
        return;
    }
    let var = |name: &str| {
        env.var(name)
            .ok()
            .map(|value| value.to_string())
            .filter(|value| !value.trim().is_empty())
    };
    // The same OTEL_* variables as everywhere (endpoint, headers, resource attributes), as
    // Worker vars.
    let builder = match Telemetry::from_vars(var) {
        Ok(Some(builder)) => builder,
        Ok(None) => return,
        Err(error) => {
            worker::console_error!("{ENDPOINT_VAR}: {error}; no OTLP export");
            return;
        }
    };
    let builder = match var(SERVICE_NAME_VAR) {
        Some(_) => builder,
        None => builder.service_name(DEFAULT_SERVICE_NAME),
    };
    let telemetry = builder
        .transport(rebuno_workers::FetchTransport::new())
        .build();
    match telemetry {
        Ok(telemetry) => {
            let subscriber = tracing_subscriber::registry()
                .with(rebuno_workers::console_layer(env))
                .with(telemetry.layer());
            // Already set (by code of yours): that subscriber stays, without this exporter.
            if tracing::subscriber::set_global_default(subscriber).is_err() {
                worker::console_warn!("a tracing subscriber was already set: no OTLP export");
            }
        }
        Err(error) => worker::console_error!("{ENDPOINT_VAR}: {error}; no OTLP export"),
    }
}
