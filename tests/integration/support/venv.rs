//! The interop venv of `tests/integration/support/otlp/venv.rs`.

#[path = "otlp/venv.rs"]
mod shared;

pub use shared::{python, repo};
