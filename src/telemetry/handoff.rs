//! The hand-off between the `tracing` layer and the exporters' sends, in one place.
//!
//! Who hands what to whom:
//! - [`TelemetryLayer::on_close`](super::TelemetryLayer) sees a run's (dispatch) or a step's
//!   span close and leaves its exporter here ([`span_closed`]).
//! - The SDK code that closed that span takes it back through `crate::observe`, in the same
//!   poll: the run's task ([`flush_after_run`], its last act) exports at once; the step's caller
//!   ([`schedule_after_step`]) schedules an export within the export interval.
//! - Counters kept outside any span (acknowledgements, kernel retries) go to every exporter
//!   built in the process ([`kernel_retry`], [`acked`]).
//!
//! Why a thread-local: the SDK's code cannot name the exporters (they are layers of a subscriber
//! it never sees), and a layer can neither await nor spawn. A span closes inside the poll of the
//! code that ends it, on that thread, so the layer leaves its exporter in a thread-local and that
//! code takes it before its next `.await`. Why a global: acknowledgements and kernel retries
//! happen outside any exported span, so no layer sees them; the counters are per process.

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::thread::LocalKey;
use std::time::Duration;

use super::export::Exporter;
use super::metrics::Metrics;

/// Every exporter built in this process, for the counters kept outside any span.
static BUILT: Mutex<Vec<Weak<Exporter>>> = Mutex::new(Vec::new());

/// Exporters a layer left on this thread until the SDK's code takes them.
type Closed = RefCell<Vec<Arc<Exporter>>>;

thread_local! {
    /// The exporters that saw a run's span close, until the run's task takes them.
    static CLOSED_RUNS: Closed = const { RefCell::new(Vec::new()) };
    /// The exporters that saw a step's span close, until the step's caller takes them.
    static CLOSED_STEPS: Closed = const { RefCell::new(Vec::new()) };
}

/// Called by the builder: `shared` gets the per-process counters from now on.
pub(super) fn register(shared: &Arc<Exporter>) {
    let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
    built.retain(|weak| weak.strong_count() > 0);
    built.push(Arc::downgrade(shared));
}

/// Applies `update` to the metrics of every exporter still alive.
fn each_built(update: impl Fn(&mut Metrics)) {
    let built: Vec<_> = BUILT.lock().unwrap_or_else(PoisonError::into_inner).clone();
    for shared in built.iter().filter_map(Weak::upgrade) {
        shared.with_metrics(&update);
    }
}

/// Called by the layer when a run's span (`run`) or a step's closes: it leaves its exporter
/// for the SDK's code that closed the span.
pub(super) fn span_closed(shared: &Arc<Exporter>, run: bool) {
    let closed = if run { &CLOSED_RUNS } else { &CLOSED_STEPS };
    closed.with(|closed| {
        let mut closed = closed.borrow_mut();
        if !closed.iter().any(|known| Arc::ptr_eq(known, shared)) {
            closed.push(Arc::clone(shared));
        }
    });
}

/// Takes the exporters left in `closed` on this thread.
fn take(closed: &'static LocalKey<Closed>) -> Vec<Arc<Exporter>> {
    closed.with(|closed| std::mem::take(&mut *closed.borrow_mut()))
}

/// After a step's span closed: each exporter that saw it gets an export within its
/// [`export_interval`](super::TelemetryBuilder::export_interval), on `runtime`, unless one is
/// already on its way. A process killed mid-run so loses at most the last interval's spans.
pub(crate) fn schedule_after_step(runtime: &crate::rt::Runtime) {
    for shared in take(&CLOSED_STEPS) {
        if shared.export_scheduled.swap(true, Ordering::AcqRel) {
            continue;
        }
        // The delay is made inside the task, so nothing touches the timer unless it runs.
        let sleeper = runtime.clone();
        let export = crate::rt::Task::new(async move {
            sleeper.sleep(shared.export_interval).await;
            shared.export_scheduled.store(false, Ordering::Release);
            if let Err(error) = shared.flush_within(shared.timeout, false).await {
                tracing::warn!(%error, "telemetry export failed; kept for the next flush");
            }
        });
        // Spawned with no current span: a spawner that carries the current span into its
        // tasks (TokioRuntime does) would keep the run's span open until the export, past the
        // run's own flush. (Entering `Span::none()` would not do: it leaves the current span.)
        let no_span = tracing::subscriber::NoSubscriber::default();
        tracing::subscriber::with_default(no_span, || runtime.spawn(export));
    }
}

/// Flushes the exporters whose layer saw the run that just ended, each within its timeout and
/// `cap`; a failure is logged, never raised (the run is over). Only those: an exporter of
/// another subscriber (another test, another runtime) is left to its own runs.
pub(crate) async fn flush_after_run(cap: Option<Duration>) {
    // Taken before the first await, in the poll that closed the run's span.
    for shared in take(&CLOSED_RUNS) {
        let budget = cap.map_or(shared.timeout, |cap| cap.min(shared.timeout));
        if let Err(error) = shared.flush_within(budget, false).await {
            tracing::warn!(%error, "telemetry export failed; kept for the next flush");
        }
    }
}

/// Counts a kernel request sent again.
pub(crate) fn kernel_retry() {
    each_built(Metrics::kernel_retry);
}

/// Records how long a dispatch took to acknowledge.
pub(crate) fn acked(millis: f64) {
    each_built(|m| m.acked(millis));
}
