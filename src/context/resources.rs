//! What the context knows of a resource opened in this dispatch: its registration and how to
//! checkpoint it, with the driver's types erased (the `resource` module supplies the drivers).

use std::any::Any;

use serde::Serialize;
use serde_json::Value;

use super::Suspension;
use crate::error::BoxError;
use crate::rt::{BoxFuture, MaybeSend, MaybeSync};

/// What the kernel is told about a resource, sent again on every registration.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Registration {
    pub(crate) key: String,
    pub(crate) driver_id: String,
    pub(crate) configuration: Value,
    pub(crate) coverage_reuse: bool,
    pub(crate) every_steps: u32,
    pub(crate) on_completion: bool,
}

impl Registration {
    pub(crate) fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// A registered resource the context can checkpoint without knowing its driver.
pub(crate) trait Registered: MaybeSend + MaybeSync {
    fn key(&self) -> &str;
    fn registration(&self) -> &Registration;
    /// The handle, for [`resource`](crate::resource()) to hand out again.
    fn handle(&self) -> &dyn Any;
    fn checkpoint(&self) -> BoxFuture<'_, Result<String, BoxError>>;
    /// Tells the driver how the dispatch ended (see `ResourceDriver::release`).
    fn release(&self, end: DispatchEnd) -> BoxFuture<'_, Result<(), BoxError>>;
}

/// How a dispatch that opened a resource ended, as
/// [`ResourceDriver::release`](crate::resource::ResourceDriver::release) hears it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DispatchEnd {
    /// The execution completed.
    Completed,
    /// The execution failed.
    Failed,
    /// The dispatch ended without an outcome, for this reason (never
    /// [`Suspension::LeaseSuperseded`]).
    Suspended(Suspension),
}
