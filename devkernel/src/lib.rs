//! An in-memory Rebuno kernel speaking the `/v0` protocol.
//!
//! `rebuno-devkernel` mirrors `rebuno dev` of the Go kernel: the same HTTP API, HMAC request
//! signatures on agent routes, dispatch leases fenced by attempt, the step identity and submit
//! algorithm, policies and approvals, all in memory. Examples start it in-process; tests use
//! it as a harness for agents ([`DevKernel`]); the `rebuno-dev` binary serves it from a
//! manifest.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
//! use std::time::Duration;
//!
//! let kernel = DevKernel::start().await?;
//! kernel.register_agent(AgentSpec::new("hello", "http://127.0.0.1:5000/webhook", "dev-secret"))?;
//! let run = kernel
//!     .create_execution(NewExecution::new("hello", serde_json::json!({"name": "Ada"})))
//!     .await?;
//! let done = kernel.wait_terminal(&run.id, Duration::from_secs(30)).await?;
//! for event in kernel.events(&run.id) {
//!     println!("{} {}", event.event_seq, event.kind);
//! }
//! # let _ = done;
//! # Ok(()) }
//! ```
//!
//! Design: every execution lives behind its own lock; each mutation appends to the
//! execution's event log and updates the status, step, dispatch and approval projections in
//! the same critical section. Deliveries run as background tasks (one per due dispatch,
//! delivered at once rather than polled); a sweeper reclaims expired leases and expires
//! approvals.
//!
//! The `rebuno-dev` binary serves the kernel and is also a small client:
//! `rebuno-dev exec create|list|get|events|timeline|export|cancel|redeliver`, `rebuno-dev approvals list|grant|deny`.
//! How it retries deliveries is [`DispatchRetry`].
//!
//! For testing agents: [`testing`] is the guide, with an example of each tool: end-to-end
//! runs ([`DevKernel::run_completed`]), [`crash::crash_every_step`], [`replay::check`] before a
//! deploy, virtual time on a [manual clock](DevKernelBuilder::manual_clock),
//! [`DevKernel::wait_for_event`] and [`Policy::test_cases`]. A failed test says why: a wait on
//! an execution that ended returns at once with its status, failure reason and last events.
//!
//! Policies work as in the Go kernel: an agent without a bundle is unrestricted, and a
//! bundle's `default_action` is `deny` unless it says `allow`, so once an agent has a bundle,
//! every tool and LLM call no rule matches is denied (unmatched `local` steps are allowed).
//!
//! Which routes it serves, what it leaves out (a judge for the `judge` policy decision) and how
//! it decides where PROTOCOL.md leaves a choice open are written up in
//! [docs/devkernel-fidelity.md](https://github.com/rebuno/rebuno-rs/blob/main/docs/devkernel-fidelity.md).
// Every function of the dev kernel stays under 60 lines (clippy.toml's threshold).
#![warn(clippy::too_many_lines)]

mod backoff;
mod clock;
pub mod crash;
mod dispatch_retry;
mod error;
mod event;
mod harness;
mod http;
pub mod identity;
mod kernel;
mod manifest;
mod model;
mod policy;
pub mod replay;
mod store;
#[doc = include_str!("../docs/testing.md")]
pub mod testing {}
mod usage;

pub use dispatch_retry::{DispatchRetry, DispatchRetryError};
pub use error::KernelError;
pub use event::EventKind;
pub use harness::{
    AgentSpec, DevKernel, DevKernelBuilder, DevKernelError, ExecutionExt, OutputError, ServedAgent,
};
pub use kernel::NewExecution;
pub use manifest::{Manifest, ManifestError};
pub use policy::{Policy, PolicyError};
