//! A resource opened in this dispatch, with its driver's types erased.

use std::any::Any;

use serde::Serialize;
use serde_json::Value;

use super::driver::{Checkpoints, ResourceDriver};
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
    pub(crate) fn new<D: ResourceDriver>(key: &str, driver: &D, checkpoints: Checkpoints) -> Self {
        Self {
            key: key.to_owned(),
            driver_id: driver.driver_id(),
            configuration: driver.configuration(),
            coverage_reuse: driver.coverage_reuse(),
            every_steps: checkpoints.every_steps,
            on_completion: checkpoints.on_completion && checkpoints.every_steps > 0,
        }
    }

    pub(crate) fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// A registered resource the context can checkpoint without knowing its driver.
pub(crate) trait Registered: MaybeSend + MaybeSync {
    fn key(&self) -> &str;
    fn registration(&self) -> &Registration;
    /// The handle, for [`resource`](super::resource) to hand out again.
    fn handle(&self) -> &dyn Any;
    fn checkpoint(&self) -> BoxFuture<'_, Result<String, BoxError>>;
}

/// A driver with the handle it opened.
pub(crate) struct Live<D: ResourceDriver> {
    pub(crate) driver: D,
    pub(crate) handle: D::Handle,
    pub(crate) registration: Registration,
}

impl<D: ResourceDriver> Registered for Live<D> {
    fn key(&self) -> &str {
        &self.registration.key
    }

    fn registration(&self) -> &Registration {
        &self.registration
    }

    fn handle(&self) -> &dyn Any {
        &self.handle
    }

    fn checkpoint(&self) -> BoxFuture<'_, Result<String, BoxError>> {
        Box::pin(self.driver.checkpoint(&self.handle))
    }
}
