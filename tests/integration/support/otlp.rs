//! The OTLP receiver of `tests/integration/support/otlp/receiver.rs` (rotel in front of a recorder).

#[path = "otlp/receiver.rs"]
mod receiver;

pub use receiver::{Receiver, attribute};

use super::venv::{python, repo};
