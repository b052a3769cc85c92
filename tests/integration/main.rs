//! The integration tests of `rebuno`, one module per capability, linked into a single test
//! binary: each binary links every dependency (rig, async-openai, rmcp, the dev kernel), so one
//! binary instead of twenty-two saves minutes of linking and gigabytes of disk on a clean build.
//!
//! Run one capability with a module filter, e.g. `cargo test -p rebuno --test integration llm::`.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

mod support;

mod async_openai_client;
mod background;
mod client_admin;
mod client_errors;
mod coverage;
mod crash;
mod deadline;
mod drivers;
mod e2b;
mod execution;
mod first_run;
mod input_errors;
mod interop;
mod lease;
mod llm;
mod llm_gateway;
mod llm_stub_selftest;
mod logs;
mod mcp;
mod metadata;
mod outage;
mod parity;
mod policy;
mod refusal;
mod resource;
mod retry;
mod rig;
mod rig_llm;
mod rotation;
mod session;
mod sizes;
mod spans;
mod subagent;
mod suspension;
mod telemetry;
mod tools;
mod transport_hyper;
mod webhook;
