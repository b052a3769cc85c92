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
//! Cloudflare cancels `waitUntil` work about 30 s after the response, so each run gets a
//! [`Deadline`](rebuno::rt::Deadline) of request time + 30 s and starts no new step in its last
//! 10 s ([`Limits`]; vars [`WAIT_UNTIL_VAR`] and [`MARGIN_VAR`]): the kernel re-delivers it when
//! the lease expires, the recorded steps replay, and a long execution proceeds in slices of
//! about 20 s. For runs that must not be sliced, **Durable Object mode** runs each execution in
//! an object of its own, with no deadline: [`forward_to_durable_object`] in the Worker's `fetch`,
//! [`serve_in_durable_object`] and [`alarm_in_durable_object`] in the object's `fetch` and
//! `alarm` (an alarm every [`HEARTBEAT`] keeps the object from being evicted while idle).
//!
//! [`agent_builder`] sets up the agent on [`runtime()`] and [`FetchTransport`] (the Workers
//! `fetch`: smaller than reqwest, no redirects, aborts on timeout, streams answers, so it also
//! serves `rebuno::llm::DurableLlm::from_transport` and `rebuno::mcp::StreamableHttp`).
//! [`init_logging`] sends the SDK's `tracing` lines to the Workers console at the level of the
//! var `RUST_LOG` ([`LOG_VAR`]); with a subscriber of your own, add [`console_layer`] to it.
//! Everything here is for `wasm32-unknown-unknown`; on other targets the crate only has
//! [`Limits`] and the variable names, so host builds of a workspace that contains it still work.
//!
//! # Guides
//!
//! - The [README's quick starts](https://github.com/rebuno/rebuno-rs#cloudflare-workers-wrangler-deploy):
//!   two complete new projects (`wait_until` and Durable Object mode), with the one command
//!   that installs their tools.
//! - The [Workers deploy guide](https://github.com/rebuno/rebuno-rs/tree/main/deploy/workers):
//!   deploying, the limits (30 s, CPU, size, requests) and their settings, Durable Object mode,
//!   panics (`panic = "abort"`), logs, outages and leases.

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
