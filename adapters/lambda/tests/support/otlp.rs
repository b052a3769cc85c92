//! The OTLP receiver of `tests/integration/support/otlp/receiver.rs` (rotel in front of a recorder, from the
//! repository's interop venv).

#[path = "../../../../tests/integration/support/otlp/venv.rs"]
mod venv;

#[path = "../../../../tests/integration/support/otlp/receiver.rs"]
mod receiver;

pub use receiver::{Receiver, attribute};

use venv::{python, repo};
