//! The OTLP receiver of `tests/otlp/receiver.rs` (rotel in front of a recorder, from the
//! repository's interop venv).

#[path = "../../../../tests/otlp/venv.rs"]
mod venv;

#[path = "../../../../tests/otlp/receiver.rs"]
mod receiver;

pub use receiver::{Receiver, attribute};

use venv::{python, repo};
