//! The dev kernel's integration tests, one module per area, linked into a single test binary so
//! a clean build links once instead of eleven times.
//!
//! Run one area with a module filter, e.g. `cargo test -p rebuno-devkernel --test integration flow::`.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod common;

mod api_keys;
mod auth;
mod cli;
mod cli_errors;
mod clock;
mod conformance;
mod crash;
mod dispatch_retry;
mod flow;
mod forks;
mod golden;
mod harness_messages;
mod helpers;
mod late_ack;
mod limits;
mod policy_approvals;
mod policy_test;
/// Loopback ports for the rebuno-dev processes these tests start (shared with the core's tests).
#[path = "../../../tests/integration/support/ports.rs"]
#[allow(unreachable_pub)]
mod ports;
mod recovery;
mod redeliver;
mod replay;
mod replay_edges;
mod resources;
mod restart;
mod restart_leases;
mod serve;
mod sessions_subagents;
mod stream;
mod virtual_time;
