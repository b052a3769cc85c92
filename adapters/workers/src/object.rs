//! Inside the execution's Durable Object: the run, kept alive by an alarm heartbeat.
//!
//! A Durable Object is stopped in two ways while a run is under way:
//!
//! - **Idle**: with no request and no alarm for about 70 s, the runtime drops the object and its
//!   pending work, without an error. Outgoing requests (the run's kernel calls, its LLM stream)
//!   do not count as activity. An alarm does: while a run is under way, the object sets one every
//!   [`HEARTBEAT`], so it is never idle.
//! - **Restarted** (a deploy, a runtime update, a failure): memory is gone, storage and alarms
//!   are not. The run stops heartbeating its lease, so the kernel re-delivers the execution when
//!   the lease expires, as a new attempt, to the same object, where the recorded steps are
//!   replayed. The object does not resume the old attempt itself: the kernel numbers a step's
//!   occurrences per attempt, so a second run of the same attempt would not find the first
//!   one's steps. The heartbeat alarm that fires on the restarted object finds no run in memory,
//!   logs the loss and stops.

use std::time::Duration;

use rebuno::Agent;
use wasm_bindgen::JsValue;
use worker::{State, Storage};

use crate::durable::OBJECT_HEADER;
use crate::runs;
use crate::serve::task_promise;

/// How often the alarm fires while a run is under way: well inside the idle limit (about 70 s),
/// as Cloudflare's own agents framework does.
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// The storage key marking a run under way (its start, in Unix milliseconds), so an object
/// that restarted can tell that it lost one.
const RUNNING_KEY: &str = "rebuno.running_since";

/// Serves a dispatch forwarded by [`forward_to_durable_object`](crate::forward_to_durable_object),
/// inside the Durable Object's `fetch`: checks it again, acknowledges it (naming the object in
/// [`OBJECT_HEADER`]), and runs it with no deadline under the object's `waitUntil`.
///
/// While the run is under way an alarm fires every [`HEARTBEAT`] (and a marker of the run is
/// kept in the object's storage, key `rebuno.running_since`): call [`alarm_in_durable_object`]
/// from the object's `alarm`. That keeps the object from being evicted as idle. Both are
/// cleared when the object's last run ends.
///
/// ```ignore
/// use worker::{DurableObject, Env, Request, Response, Result, State, durable_object};
///
/// // `alarm`: the constructor, `fetch` and `alarm` handlers.
/// #[durable_object(alarm)]
/// pub struct RebunoRun {
///     state: State,
///     env: Env,
/// }
///
/// impl DurableObject for RebunoRun {
///     fn new(state: State, env: Env) -> Self {
///         Self { state, env }
///     }
///
///     async fn fetch(&self, request: Request) -> Result<Response> {
///         let agent = agent(&self.env).map_err(|e| worker::Error::RustError(e.to_string()))?;
///         rebuno_workers::serve_in_durable_object(&agent, &self.state, request).await
///     }
///
///     async fn alarm(&self) -> Result<Response> {
///         rebuno_workers::alarm_in_durable_object(&self.state).await
///     }
/// }
/// ```
///
/// # Errors
///
/// When the request or the answer cannot be converted between `worker` and `http` types, or
/// the runtime refuses `waitUntil`.
pub async fn serve_in_durable_object(
    agent: &Agent,
    state: &State,
    request: worker::Request,
) -> worker::Result<worker::Response> {
    let request = worker::HttpRequest::try_from(request)?;
    let mut dispatch = agent.handle(request).await;
    if let Some(task) = dispatch.background.take() {
        let storage = state.storage();
        runs::started(state);
        let run = run_then_settle(task, storage, runs::instance(state));
        if let Err(error) = state.as_raw().wait_until(&task_promise(run)) {
            // No run after all (and no marker or alarm: the run would have set them).
            runs::ended(&runs::instance(state));
            return Err(worker::Error::from(error));
        }
    }
    if let Ok(value) = http::HeaderValue::from_str(&runs::object_id(state)) {
        dispatch.response.headers_mut().insert(OBJECT_HEADER, value);
    }
    worker::Response::try_from(dispatch.response)
}

/// Serves the Durable Object's `alarm`: the heartbeat of [`serve_in_durable_object`].
///
/// While a run of this object is under way it sets the next alarm. When none is, but one was
/// (the object restarted mid-run), it logs the loss: the kernel re-delivers that execution
/// once its lease expires. Then it stops until the next run.
///
/// # Errors
///
/// Never in practice (a failed alarm would be retried by the runtime, so problems are logged
/// instead); the `Result` matches the `alarm` handler's.
pub async fn alarm_in_durable_object(state: &State) -> worker::Result<worker::Response> {
    let storage = state.storage();
    if runs::under_way(state) > 0 {
        beat(&storage).await;
        return worker::Response::ok("running");
    }
    match storage.get::<f64>(RUNNING_KEY).await {
        Ok(Some(since)) => {
            tracing::warn!(
                running_since_ms = since,
                "the Durable Object restarted during a run: the kernel re-delivers it once its lease expires"
            );
            if let Err(error) = storage.delete(RUNNING_KEY).await {
                tracing::warn!(%error, "clearing the run marker failed");
            }
            worker::Response::ok("lost")
        }
        Ok(None) => worker::Response::ok("idle"),
        Err(error) => {
            tracing::warn!(%error, "reading the run marker failed");
            worker::Response::ok("unreadable")
        }
    }
}

/// Marks a run under way and starts the heartbeat.
async fn mark_running(storage: &Storage) {
    let now = js_sys::Date::now();
    if let Err(error) = storage.put(RUNNING_KEY, now).await {
        tracing::warn!(%error, "storing the run marker failed");
    }
    beat(storage).await;
}

/// Sets the next heartbeat alarm.
async fn beat(storage: &Storage) {
    if let Err(error) = storage.set_alarm(HEARTBEAT).await {
        tracing::warn!(
            %error,
            "setting the heartbeat alarm failed: without it an idle object is evicted mid-run \
             (declare the class with #[durable_object(alarm)] and call \
             rebuno_workers::alarm_in_durable_object from its alarm)"
        );
    }
}

/// Marks the run and starts the heartbeat, runs `task`, and when it was the instance's last run
/// under way, clears the marker and the alarm.
async fn run_then_settle(task: rebuno::rt::Task, storage: Storage, instance: JsValue) {
    // In the background, not before the acknowledgement: storage writes are not on its path.
    mark_running(&storage).await;
    task.await;
    if runs::ended(&instance) > 0 {
        return;
    }
    if let Err(error) = storage.delete(RUNNING_KEY).await {
        tracing::warn!(%error, "clearing the run marker failed");
    }
    if let Err(error) = storage.delete_alarm().await {
        tracing::warn!(%error, "clearing the heartbeat alarm failed");
    }
}
