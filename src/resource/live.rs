//! A resource opened in this dispatch, with its driver's types erased.

use std::any::Any;

use super::driver::{Checkpoints, ResourceDriver};
use crate::context::{DispatchEnd, Registered, Registration};
use crate::error::BoxError;
use crate::rt::BoxFuture;

/// What the kernel is told about `driver`'s resource under `key`.
pub(crate) fn registration<D: ResourceDriver>(
    key: &str,
    driver: &D,
    checkpoints: Checkpoints,
) -> Registration {
    Registration {
        key: key.to_owned(),
        driver_id: driver.driver_id(),
        configuration: driver.configuration(),
        coverage_reuse: driver.coverage_reuse(),
        every_steps: checkpoints.every_steps,
        on_completion: checkpoints.on_completion && checkpoints.every_steps > 0,
    }
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

    fn release(&self, end: DispatchEnd) -> BoxFuture<'_, Result<(), BoxError>> {
        Box::pin(self.driver.release(&self.handle, end))
    }
}
