//! The Go kernel's own tests (repository `rebuno/rebuno`: `internal/kernel`, `internal/api`,
//! `internal/policy`, their newest stored versions) rewritten as scenarios against the dev
//! kernel's HTTP API, so the judge of the dev kernel is Rebuno's behaviour rather than code
//! written here. Each test names the Go test it mirrors; `docs/devkernel-fidelity.md` maps every
//! Go test function to its test here, or to a stated deviation with its reason.
//!
//! Run them with `cargo test -p rebuno-devkernel --test integration conformance::`.

mod api;
mod kernel_flow;
mod kernel_lease;
mod kernel_state;
mod policy;
