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
//! Health/ready and `GET /metrics` (Prometheus text: executions by status, webhook
//! deliveries by outcome, step submissions by decision); agents (upsert, list, get, delete,
//! `PUT .../metadata`); `POST /v0/policies/{id}` and `POST /v0/policies/{id}/test`;
//! approvals (list with `?status=`, get, grant, deny); scoped API keys (`POST/GET
//! /v0/api-keys`, `POST .../{id}/rotate`, `DELETE .../{id}`); executions (create with
//! sessions, parents, idempotency keys and `spawned_by`; list; get; events; cancel;
//! `previous`; `fork`; `fork-points`); the agent routes (steps list/get/submit/complete/fail,
//! heartbeat, complete, fail, suspend, resources register/bind/checkpoints); the SSE stream
//! and step deltas. Not implemented: execution deadlines (`deadline_at` is never set), the
//! `judge` policy decision (denies), retention.
//!
//! The `rebuno-dev` binary serves the kernel and is also a small client ([`cli`]):
//! `rebuno-dev exec create|list|get|events|cancel`, `rebuno-dev approvals list|grant|deny`.
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
//!
//! Resources and checkpoints (§1.9):
//!
//! * Registration follows the newest docs (§9 item 7): `every_steps` 0 (or omitted) on a
//!   first registration disables checkpointing; a positive value enables or changes it, also
//!   on an existing resource; 0 or omitted on a re-registration keeps the current policy.
//!   `on_completion` is true by default with a positive interval and always false without
//!   one. Only the first registration writes `resource.registered`. An omitted
//!   `coverage_reuse` means `false` (and so conflicts with a resource registered `true`);
//!   absent and `null` configurations are equal.
//! * A register, bind or checkpoints call on a terminal execution answers
//!   `409 execution_terminal`; all three renew the lease.
//! * A live step start affects its declared resources (none for `llm_call`, whose declared
//!   keys are ignored, unknown ones too) and every `coverage_reuse = false` resource, LLM
//!   calls included. `step.executing` then carries `resources` (sorted keys) and
//!   `generations` as an object `{key: generation}`; the step's `resources` field lists the
//!   affected keys. `due` is never set for `llm_call` steps (they do not count and the SDKs
//!   never capture after them).
//! * The count grows when a step that ran settles `succeeded`, `failed` (also the kernel's
//!   `indeterminate` failure) or `cancelled`; denials and LLM steps never count.
//! * Capture refusals are checked in the order `unknown_resource`, `missing_checkpoint_ref`,
//!   `duplicate_capture` (a checkpoint of that generation exists, also earlier in the same
//!   batch), `stale_generation`, `writers_active` (another executing step affects the key).
//!   A reported failure with an empty `error` is written as `capture_failed`. Captures sent
//!   with a `replay` or `execution_terminal` outcome are ignored.
//! * The view's `checkpoint_ref` is the newest checkpoint's reference, else the one a fork
//!   restored the resource from.
//! * Session turns (and executions with an explicit parent) inherit the parent's resources
//!   with their bindings: `resource.registered` and `resource.bound` are written after
//!   `execution.started`, before `dispatch.queued`.
//!
//! Forks (§1.8):
//!
//! * Steps whose `step.succeeded|failed|denied` event is at or before `at_seq` are copied
//!   with all their `step.*` events up to `at_seq`, in source order, interleaved with the
//!   prefix's `resource.registered` / `resource.initialized` events. Bindings are not copied
//!   (the fork creates its environment from the restored checkpoint).
//! * Each copied resource gets `resource.initialized {key, generation, checkpoint_ref?}`;
//!   its generation is the restored checkpoint's (0 for the initial environment). A covering
//!   checkpoint is also copied as `resource.checkpointed`, covering from that event's seq in
//!   the fork, so the resource starts `covered`; an earlier, non-covering one is only
//!   offered as `checkpoint_ref`.
//! * A fork keeps the source's `parent_execution_id`, input and `on_behalf_of`, not its
//!   `spawned_by` or idempotency key, and inherits the source's policy override unless it
//!   brings its own. `restoration` is omitted when no resource was registered by `at_seq`.
//!
//! API keys (§2.2, §2.7): the token's UUID is the key id; rotation keeps the id; revoking
//! is repeatable (`204`), unknown ids are `404`. Scopes: agents read/write, policies (`POST
//! /policies/{id}`; `/test` needs `executions:read` too), approvals read/write, executions
//! read (list, get, events, steps, previous, fork points, stream) and write (create, cancel,
//! fork; a fork's `policy_bundle` needs `policies:write` too), `api_keys:manage`.
//!
//! `POST /v0/policies/{id}/test` answers `{results: [case + decision, rule_id, reason?,
//! pass, failure?], failed, unexercised_rules?}`; replayed cases expect the decision of the
//! step's first `step.allowed|denied|awaiting_approval` event (`was_rule` names its rule).

mod backoff;
pub mod cli;
mod clock;
mod error;
mod event;
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
pub use harness::{AgentSpec, DevKernel, DevKernelBuilder, DevKernelError, ServedAgent};
pub use kernel::NewExecution;
pub use manifest::{Manifest, ManifestError};
pub use model::{
    AgentRecord, ApiKey, Approval, ApprovalStatus, CheckpointView, Event, Execution,
    ExecutionStatus, ForkPoints, IssuedApiKey, ResourceView, Restoration, SpawnedBy, StepDecision,
    StepRecord, StepResource, StepStatus, Timestamp,
};
pub use policy::{Policy, PolicyError};
