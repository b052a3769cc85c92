//! Where the SDK reports to the OpenTelemetry exporter (feature `opentelemetry`); without the
//! feature every function here does nothing.

use crate::rt::Deadline;

/// Time kept free before a host's deadline when a finished run exports its telemetry.
#[cfg(feature = "opentelemetry")]
const EXPORT_MARGIN_MS: u64 = 250;

/// A run's last act: export what it (and runs before it) left buffered, stopping short of the
/// host's deadline, inside the background task the host keeps alive.
pub(crate) async fn after_run(deadline: Option<Deadline>) {
    #[cfg(feature = "opentelemetry")]
    {
        use crate::rt::Clock as _;
        let cap = deadline.map(|deadline| {
            let now = crate::rt::SystemClock.unix_millis();
            let left = deadline
                .unix_millis()
                .saturating_sub(now)
                .saturating_sub(EXPORT_MARGIN_MS);
            std::time::Duration::from_millis(left)
        });
        crate::telemetry::handoff::flush_after_run(cap).await;
    }
    #[cfg(not(feature = "opentelemetry"))]
    let _ = deadline;
}

/// A step's span has just closed: its exporters send within their export interval, on the
/// execution's runtime.
pub(crate) fn after_step(runtime: &crate::rt::Runtime) {
    #[cfg(feature = "opentelemetry")]
    crate::telemetry::handoff::schedule_after_step(runtime);
    #[cfg(not(feature = "opentelemetry"))]
    let _ = runtime;
}

/// A kernel request is being sent again.
pub(crate) fn kernel_retry() {
    #[cfg(feature = "opentelemetry")]
    crate::telemetry::handoff::kernel_retry();
}

/// When a webhook arrived, for its acknowledgement latency: read only with the feature, so
/// the ack path reads no clock without it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arrival {
    #[cfg(feature = "opentelemetry")]
    at: web_time::Instant,
}

impl Arrival {
    /// Now.
    pub(crate) fn now() -> Self {
        Self {
            #[cfg(feature = "opentelemetry")]
            #[allow(clippy::disallowed_methods)] // web_time's `Instant` also works on wasm32
            at: web_time::Instant::now(),
        }
    }

    /// The dispatch that arrived then was acknowledged now.
    pub(crate) fn acked(self) {
        #[cfg(feature = "opentelemetry")]
        crate::telemetry::handoff::acked(self.at.elapsed().as_secs_f64() * 1e3);
    }
}
