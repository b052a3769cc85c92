//! The [`Runtime`] an agent runs on inside a Worker: timers, `Date.now()` and a local spawner.

use std::time::Duration;

use rebuno::rt::{Clock, Delay, Runtime, Sleep, Spawn, Task};

/// The runtime for agents served by [`fetch`](crate::fetch): [`WorkersSleep`], [`DateClock`]
/// and [`LocalSpawn`].
///
/// ```no_run
/// let agent = rebuno::Agent::builder("hello")
///     .runtime(rebuno_workers::runtime())
///     .transport(rebuno_workers::FetchTransport::new());
/// ```
pub fn runtime() -> Runtime {
    Runtime::new(LocalSpawn, WorkersSleep, DateClock)
}

/// Sleeps with [`worker::Delay`] (the Workers `setTimeout`).
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkersSleep;

impl Sleep for WorkersSleep {
    fn sleep(&self, duration: Duration) -> Delay {
        Delay::new(worker::Delay::from(duration))
    }
}

/// Reads the time with `Date.now()`.
///
/// Inside a Worker the clock only advances across I/O (Cloudflare's Spectre mitigation), which
/// is all request signing and deadlines need.
#[derive(Debug, Clone, Copy, Default)]
pub struct DateClock;

impl Clock for DateClock {
    fn unix_millis(&self) -> u64 {
        crate::limits::millis_from_js(js_sys::Date::now())
    }
}

/// Runs a task on the isolate's event loop with `wasm_bindgen_futures::spawn_local`.
///
/// Nothing keeps such a task alive after the response: [`fetch`](crate::fetch) never uses it
/// and hands every acknowledged run to `ctx.wait_until` instead. It only serves code that calls
/// [`Agent::fetch`](rebuno::Agent::fetch) directly without a
/// [`Spawner`](rebuno::rt::Spawner) extension.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalSpawn;

impl Spawn for LocalSpawn {
    fn spawn(&self, task: Task) {
        wasm_bindgen_futures::spawn_local(task);
    }
}
