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
//! use rebuno_devkernel::{AgentSpec, CreateExecution, DevKernel};
//! use std::time::Duration;
//!
//! let kernel = DevKernel::start().await?;
//! kernel.register_agent(AgentSpec::new("hello", "http://127.0.0.1:5000/webhook", "dev-secret"))?;
//! let run = kernel
//!     .create_execution(CreateExecution::new("hello", serde_json::json!({"name": "Ada"})))
//!     .await?;
//! let done = kernel.wait_terminal(run.id, Duration::from_secs(30)).await?;
//! for event in kernel.events(run.id) {
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
//! # Routes
//!
//! Health/ready; agents (upsert, list, get, delete, `PUT .../metadata`); `POST /v0/policies/{id}`;
//! approvals (list with `?status=`, get, grant, deny); executions (create with sessions,
//! parents, idempotency keys and `spawned_by`; list; get; events; cancel; `previous`); the agent
//! routes (steps list/get/submit/complete/fail, heartbeat, complete, fail, suspend); the SSE
//! stream and step deltas. Not implemented: resources and checkpoints, forks and fork points,
//! scoped API keys, `/v0/policies/{id}/test`, execution deadlines, `/metrics`.
//!
//! # Fidelity notes
//!
//! Where PROTOCOL.md leaves a choice open, this kernel decides as follows:
//!
//! * Step complete/fail check, in order: ownership, execution terminal (`execution_terminal`),
//!   unknown step (`404`), step already terminal (`replay`, no lease check), lease check
//!   (`409 lease_superseded`), step not executing (`409 conflict`).
//! * Agent complete/fail of a terminal execution answer `409 execution_terminal` before the
//!   lease is looked at; heartbeats only check the lease.
//! * `dispatch.acked` is not appended when the attempt was superseded, retired (block,
//!   suspend, park) or the execution already ended by the time the webhook returned. Its
//!   payload status is `acked`; `dispatch.failed` carries `failed`, or `exhausted` on the last
//!   attempt.
//! * `GET /v0/approvals?status=` filters by status (default `pending`).
//! * Re-registering an agent keeps its policy bundle and published metadata.
//! * Manifest `${NAME}` expansion applies to `id`, `webhook_url`, `secret` and `policy_file`,
//!   not to inline policy text (regex anchors such as `$` stay intact).
//! * Policy bundles may carry the old `priority` key (ignored: rules run in file order);
//!   `judge` rules deny (no external judge); rate limits take a token for allow and
//!   require_approval decisions; budgets count recorded LLM input + output tokens.
//! * A step with a non-empty `resources` list is refused `400 unknown resource`, since no
//!   resource can be registered here.

mod dispatcher;
mod error;
mod harness;
mod http;
pub mod identity;
mod kernel;
mod manifest;
pub mod model;
mod policy;
mod store;
mod usage;

pub use error::KernelError;
pub use harness::{AgentSpec, DevKernel, DevKernelBuilder, DevKernelError};
pub use kernel::CreateExecution;
pub use manifest::{Manifest, ManifestError};
pub use model::{
    Agent, Approval, ApprovalStatus, Event, Execution, ExecutionStatus, SpawnedBy, Step,
    StepDecision, StepResource, StepStatus, Timestamp,
};
pub use policy::{Policy, PolicyError};
