//! Facts an event carries for the kernel's own use (rebuilding projections from a persisted
//! log) but never shows on the wire.
//!
//! Such fields are marked `#[serde(default, skip_serializing_if = "private::hidden")]`: they
//! are left out of every serialization except one made inside [`stored`], which the journal
//! uses to write the full log to disk. The wire form is therefore the default, and a private
//! fact cannot leak into an API response by accident.

use std::cell::Cell;

thread_local! {
    static STORING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` (a serialization) with private facts included.
pub(crate) fn stored<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            STORING.with(|s| s.set(self.0));
        }
    }
    let _reset = Reset(STORING.with(|s| s.replace(true)));
    f()
}

/// `skip_serializing_if` for a private fact: skipped unless serializing inside [`stored`].
pub(crate) fn hidden<T>(_: &T) -> bool {
    !STORING.with(Cell::get)
}

/// `skip_serializing_if` for an optional private fact: also skipped when absent.
pub(crate) fn hidden_or_none<T>(value: &Option<T>) -> bool {
    value.is_none() || hidden(value)
}
