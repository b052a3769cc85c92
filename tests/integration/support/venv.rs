//! The interop venv of `tests/otlp/venv.rs`.

#[path = "../../otlp/venv.rs"]
mod shared;

pub use shared::{python, repo};
