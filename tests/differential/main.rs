//! Differential suite: every scenario is one agent written twice, with the **official Python
//! SDK** (`rebuno==0.29.2`, unchanged; `py/`) and with this Rust SDK (the `*_twin` builders of
//! each scenario module), each run against its own dev kernel with the same input and the same
//! injected faults; then the two event logs and step records are compared event by event after
//! normalising ids and timestamps (see `engine`). A difference prints both normalised logs side
//! by side from the first differing event.
//!
//! Run: `cargo test -p rebuno --test differential` (the venv comes from
//! `scripts/interop-venv.sh`, as for the interop suite). `tests/differential/README.md` lists
//! the scenarios and every justified difference.

#![allow(
    unreachable_pub,
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::disallowed_methods
)]

#[path = "../integration/support/llm_stub.rs"]
#[allow(dead_code, unreachable_pub)]
mod llm_stub;
#[path = "../integration/support/ports.rs"]
mod ports;
#[path = "../integration/support/pyagent.rs"]
mod pyagent;
#[path = "../integration/support/otlp/venv.rs"]
#[allow(dead_code)]
mod venv;

mod engine;
mod kit;
mod run;
mod world;

mod failures;
mod faults;
mod flows;
mod gates;
mod llm;
mod tools;
