//! The integration tests of `rebuno-hyper`, one module per concern, linked into a single test
//! binary (each binary links the whole dependency graph, so one saves link time and disk).
//!
//! Run one concern with a module filter, e.g. `cargo test -p rebuno-hyper --test integration idle::`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

mod accept_backoff;
mod idle;
mod limits;
mod serve;
mod shutdown;
