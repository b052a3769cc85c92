//! [`Idempotency`]: whether a step may run again when a dispatch replays.

/// Whether a step may run again when a dispatch replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Idempotency {
    /// Reads and anything else fine to run again: a step that never completed runs again.
    #[default]
    SafeToRetry,
    /// Destructive work (send an email, charge a card): if a resumed dispatch finds the step
    /// already executing, the kernel fails it as `indeterminate` and the call returns a
    /// [`ErrorKind::Tool`](crate::ErrorKind::Tool) error so the handler can reconcile.
    AtMostOnce,
}

impl Idempotency {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SafeToRetry => "safe_to_retry",
            Self::AtMostOnce => "at_most_once",
        }
    }
}
