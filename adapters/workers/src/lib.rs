//! Run a [`rebuno::Agent`] on Cloudflare Workers (`wasm32-unknown-unknown`).
//!
//! ```ignore
//! use std::cell::OnceCell;
//!
//! use rebuno::{Agent, Body, HandlerError};
//! use worker::{Context, Env, HttpRequest, event};
//!
//! thread_local! {
//!     // One agent per isolate: it remembers which executions this isolate is running.
//!     static AGENT: OnceCell<Agent> = const { OnceCell::new() };
//! }
//!
//! fn agent(env: &Env) -> rebuno::Result<Agent> {
//!     if let Some(agent) = AGENT.with(|cell| cell.get().cloned()) {
//!         return Ok(agent);
//!     }
//!     rebuno_workers::init_logging(env); // the SDK's logs in the console, var RUST_LOG
//!     // REBUNO_URL (a var) and REBUNO_AGENT_SECRET (a secret) come from the Worker's bindings.
//!     let agent = rebuno_workers::agent_builder("hello", env)
//!         .handler(|name: String| async move { Ok::<_, HandlerError>(format!("hello, {name}")) })
//!         .build()?;
//!     AGENT.with(|cell| cell.set(agent.clone()).ok());
//!     Ok(agent)
//! }
//!
//! #[event(fetch)]
//! async fn fetch(req: HttpRequest, env: Env, ctx: Context) -> worker::Result<http::Response<Body>> {
//!     let agent = agent(&env).map_err(|e| worker::Error::RustError(e.to_string()))?;
//!     rebuno_workers::fetch(&agent, req, &env, &ctx).await
//! }
//! ```
//!
//! [`fetch`] verifies the kernel's signed webhook and answers `200` at once; the acknowledged
//! run goes to **`ctx.wait_until`**, so the Workers runtime keeps the isolate working on it after
//! the response. `GET` and `HEAD` answer `200 ok` (health checks); a bad signature gets `401`.
//!
//! # Logs
//!
//! The SDK logs through `tracing` (a wrong secret's `401`, a run that fails, a kernel it cannot
//! reach), and, being a library, installs no subscriber. [`init_logging`] on the isolate's
//! first request sends those lines to the Workers console (`wrangler tail`, the dashboard,
//! `wrangler dev`), at the level of the Worker var `RUST_LOG` ([`LOG_VAR`]), `info` by
//! default; with a subscriber of your own (an OTLP exporter's), add [`console_layer`] to it.
//!
//! # The 30-second limit and deadlines
//!
//! Cloudflare cancels `waitUntil` work about 30 s after the response. Each acknowledged run
//! gets a [`Deadline`](rebuno::rt::Deadline) of *request time + 30 s* with a **10 s margin**
//! ([`Limits`]): the run starts no new step in the last 10 s, ends the dispatch quietly after
//! the step in flight, and the kernel re-delivers it when the lease expires. The next dispatch
//! replays every recorded step (nothing runs twice) and continues, so a long execution proceeds
//! in slices of about 20 s.
//!
//! | setting | default | override |
//! |---|---|---|
//! | wait-until budget | 30 s | [`Limits::wait_until`], var `REBUNO_WAIT_UNTIL_SECONDS` |
//! | deadline margin | 10 s | [`Limits::margin`], var `REBUNO_DEADLINE_MARGIN_SECONDS` |
//!
//! Set the margin above your slowest single step (an LLM call): a step cut off by the
//! platform runs again on the re-delivery. Register Workers agents with a short
//! `lease_timeout_seconds` (10–30 s), so a yielded run is re-delivered soon; the lease is
//! renewed every third of it while the run is alive.
//!
//! # Panics and limits on Workers
//!
//! Workers build Rust with `panic = "abort"`: a panic in a handler, a tool body or the SDK
//! aborts the isolate, so it cannot be turned into a failed execution as on native hosts. What
//! the kernel sees: the dispatch was acknowledged, then its heartbeats stop; when the lease
//! expires it re-delivers, the next run replays what was recorded and reaches the panic again,
//! and after `max_attempts` (5 by default) the execution fails `dispatch_exhausted`. Keep the
//! lease short on Workers (10–30 s) so this ends in minutes, and return errors instead of
//! panicking (`Result` from every tool body): an `Err` fails the execution at once with its text.
//!
//! Limits on this host: the platform bounds request heads, bodies and connection counts itself
//! (Cloudflare's plan limits; a webhook is about 200 bytes), and the core refuses bodies over
//! 64 KiB with `413` and malformed payloads with `400` before anything runs. Background work
//! is bounded by [`Limits`] below.
//!
//! # Durable Object mode: runs without the 30-second cut
//!
//! For runs that outlast the slices above, for instance a model streaming a long answer, run
//! each execution in a [Durable Object] of its own. The Worker checks the webhook and forwards
//! it with [`forward_to_durable_object`] to the object named after the execution; the object
//! acknowledges it and runs it with [`serve_in_durable_object`] under the object's
//! `waitUntil`, which is not cut at 30 s, so the run gets no deadline; every dispatch of an
//! execution reaches the same object.
//!
//! An object is stopped when it is idle (no request and no alarm for about 70 s: a run's own
//! outgoing requests do not count) and when it restarts (deploys, runtime updates). So while a
//! run is under way the object sets an alarm every [`HEARTBEAT`], as Cloudflare's agents
//! framework does, and [`alarm_in_durable_object`], called from the object's `alarm`, sets the
//! next one: the object is never idle. A restart stops the run's lease heartbeats, so the kernel
//! re-delivers the execution when its lease expires, to the same object, where the recorded
//! steps are replayed.
//!
//! ```ignore
//! use worker::{DurableObject, Env, Request, Response, State, durable_object};
//!
//! #[event(fetch)]
//! async fn fetch(req: HttpRequest, env: Env, _ctx: Context) -> worker::Result<http::Response<Body>> {
//!     let agent = agent(&env).map_err(|e| worker::Error::RustError(e.to_string()))?;
//!     rebuno_workers::forward_to_durable_object(&agent, req, &env, "REBUNO_RUNS").await
//! }
//!
//! // `alarm`: the constructor and the `fetch` and `alarm` handlers.
//! #[durable_object(alarm)]
//! #[derive(Debug)]
//! pub struct RebunoRun {
//!     state: State,
//!     env: Env,
//! }
//!
//! impl DurableObject for RebunoRun {
//!     fn new(state: State, env: Env) -> Self {
//!         Self { state, env }
//!     }
//!
//!     async fn fetch(&self, request: Request) -> worker::Result<Response> {
//!         let agent = agent(&self.env).map_err(|e| worker::Error::RustError(e.to_string()))?;
//!         rebuno_workers::serve_in_durable_object(&agent, &self.state, request).await
//!     }
//!
//!     async fn alarm(&self) -> worker::Result<Response> {
//!         rebuno_workers::alarm_in_durable_object(&self.state).await
//!     }
//! }
//! ```
//!
//! `#[durable_object]` expands to wasm-bindgen code, so the crate needs `wasm-bindgen` as a
//! dependency of its own, at the version of the wasm-bindgen CLI that builds it:
//!
//! ```toml
//! [dependencies]
//! wasm-bindgen = "=0.2.130" # cargo install wasm-bindgen-cli@0.2.130
//! worker = { version = "0.8.7", features = ["http"] }
//! ```
//!
//! and, in `wrangler.toml`, the binding and its class:
//!
//! ```toml
//! [[durable_objects.bindings]]
//! name = "REBUNO_RUNS"
//! class_name = "RebunoRun"
//!
//! [[migrations]]
//! tag = "v1"
//! new_sqlite_classes = ["RebunoRun"]
//! ```
//!
//! Durable Objects need the Workers Paid plan. `tests/workers/run.sh` runs the example in this
//! mode in workerd: a 9 s model stream against a 6 s budget is read to its end in one delivery;
//! a 150 s run outlives workerd's idle eviction (it never does without the heartbeat); and a run
//! whose runtime stops mid-run is re-delivered to the restarted object and completes, no step
//! run twice.
//!
//! [Durable Object]: https://developers.cloudflare.com/durable-objects/
//!
//! # Runtime and transport
//!
//! [`agent_builder`] sets up the agent on [`runtime()`] ([`worker::Delay`] for sleeps,
//! `Date.now()` for the clock) and [`FetchTransport`] (the Workers `fetch`, not reqwest: smaller,
//! no redirects, aborts on timeout); add the handler and anything else, then `build()`.
//! `FetchTransport` also streams answers, so `rebuno::llm::DurableLlm::from_transport(FetchTransport::new())`
//! makes durable LLM calls from a Worker that read a provider's server-sent events live, and
//! `rebuno::mcp::StreamableHttp::builder(url).transport(FetchTransport::new())` connects to an
//! MCP server whose tools then run as durable tools.
//!
//! # Targets
//!
//! Everything here is for `wasm32-unknown-unknown`. On other targets the crate only has
//! [`Limits`] and the variable names, so host builds of a workspace that contains it still work.
//!
//! # Deploying
//!
//! The repository's README has two complete new projects, `wait_until` and Durable Object mode
//! (`Cargo.toml` with its size profile, `package.json`, `wrangler.toml`, `src/lib.rs`), and
//! the one command that installs their tools from crates.io and npm (worker-build 0.8.7,
//! wasm-bindgen-cli 0.2.130, and wrangler, wasm-opt and esbuild through `npm install`), so
//! that `worker-build --release` downloads nothing. `npx wrangler dev --local` runs the Worker
//! on your machine (its log lines in that terminal), `npx wrangler deploy` deploys it; set
//! the kernel's `webhook_url` for the agent to the Worker's URL. See `deploy/workers/README.md`
//! in the repository for the limits, the logs (`wrangler tail`) and leases.

#![cfg_attr(docsrs, feature(doc_cfg))]
// The Workers items the docs link to exist only on wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(rustdoc::broken_intra_doc_links))]

#[cfg(target_arch = "wasm32")]
mod durable;
mod limits;
mod logging;
#[cfg(target_arch = "wasm32")]
mod object;
#[cfg(target_arch = "wasm32")]
mod rt;
#[cfg(target_arch = "wasm32")]
mod runs;
#[cfg(target_arch = "wasm32")]
mod serve;
#[cfg(target_arch = "wasm32")]
mod transport;

#[cfg(target_arch = "wasm32")]
pub use crate::durable::{OBJECT_HEADER, forward_to_durable_object};
pub use crate::limits::{Limits, MARGIN_VAR, WAIT_UNTIL_VAR};
pub use crate::logging::LOG_VAR;
#[cfg(target_arch = "wasm32")]
pub use crate::logging::{console_layer, init_logging};
#[cfg(target_arch = "wasm32")]
pub use crate::object::{HEARTBEAT, alarm_in_durable_object, serve_in_durable_object};
#[cfg(target_arch = "wasm32")]
pub use crate::rt::{DateClock, LocalSpawn, WorkersSleep, runtime};
#[cfg(target_arch = "wasm32")]
pub use crate::serve::{agent_builder, fetch, fetch_with};
#[cfg(target_arch = "wasm32")]
pub use crate::transport::FetchTransport;

/// The Worker variable holding the kernel's URL.
pub const URL_VAR: &str = "REBUNO_URL";
/// The Worker secret holding the agent's webhook secret.
pub const SECRET_VAR: &str = "REBUNO_AGENT_SECRET";
