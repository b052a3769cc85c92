//! Resources: external state (a sandbox, a directory, a database) that the SDK checkpoints
//! during the run and a fork restores.
//!
//! [`resource`] registers a resource with the current execution and returns the driver's
//! handle. On first use the driver creates it from the initial environment, or from the
//! checkpoint a fork selected; later dispatches reopen the recorded binding; the same key within
//! a dispatch returns the same handle. A baseline checkpoint is captured when no checkpoint
//! covers the starting state.
//!
//! Tools and local steps declare what they may change with `.resources(["workspace"])`; while
//! an execution has resources they run one at a time. After every Nth affecting live step
//! ([`Checkpoints::every`]) the SDK captures a checkpoint after the body and before the outcome
//! is recorded; a capture failure keeps the outcome and leaves the resource uncovered.

mod driver;
#[cfg(any(
    feature = "e2b",
    all(any(feature = "dir", feature = "sqlite"), not(target_arch = "wasm32"))
))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "dir", feature = "sqlite", feature = "e2b")))
)]
pub mod drivers;
mod live;

use std::sync::Arc;

use serde_json::Value;

use self::driver::NoCheckpoints;
pub use self::driver::{CheckpointUnavailable, Checkpoints, ResourceDriver};
use self::live::{Live, registration};
pub use crate::context::DispatchEnd;
use crate::context::{ExecutionContext, current};
use crate::error::{BoxError, Error, ErrorKind, Result};
use crate::wire::{ResourceGeneration, ResourceView};

/// Registers the resource `key` with the current execution and returns its handle.
///
/// ```no_run
/// # use rebuno::resource::{Checkpoints, ResourceDriver};
/// # async fn demo<D: ResourceDriver>(driver: D) -> rebuno::Result<()> {
/// let workspace = rebuno::resource::resource("workspace", driver, Checkpoints::every(5)).await?;
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`ErrorKind::Context`] outside an execution; [`ErrorKind::CheckpointUnavailable`] when the
/// fork's checkpoint is gone (the execution fails); [`ErrorKind::Resource`] when the driver
/// fails; [`ErrorKind::Config`] when `key` was opened with another driver type in this
/// dispatch; kernel errors.
pub async fn resource<D: ResourceDriver>(
    key: &str,
    driver: D,
    checkpoints: Checkpoints,
) -> Result<D::Handle> {
    if let Some(refusal) = checkpoints.refusal() {
        return Err(Error::new(
            ErrorKind::Config,
            format!("resource {key:?}: {refusal}"),
        ));
    }
    let context =
        current().ok_or_else(|| Error::outside_execution(&format!("resource({key:?})")))?;
    let _exclusive = context.exclusive_always().await;
    if let Some(existing) = context.resource(key) {
        return existing
            .handle()
            .downcast_ref::<D::Handle>()
            .cloned()
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Config,
                    format!("resource {key:?} was opened with another driver type"),
                )
            });
    }
    let registration = registration(key, &driver, checkpoints);
    let unsupported = NoCheckpoints(driver.driver_id()).to_string();
    let kernel = context.kernel();
    let view = kernel
        .register_resource(context.id(), context.lease(), &registration.to_json())
        .await
        .map_err(|e| context.note(e))?;
    let handle = open_or_create(&context, &driver, &view).await?;
    context.add_resource(Arc::new(Live {
        driver,
        handle: handle.clone(),
        registration,
    }));
    if view.every_steps > 0 && !view.covered {
        let baseline = ResourceGeneration {
            key: key.to_owned(),
            generation: view.generation,
            due: true,
        };
        let records = context.capture(&[baseline]).await;
        if records
            .capture_failures
            .iter()
            .any(|f| f.error == unsupported)
        {
            return Err(Error::new(
                ErrorKind::Config,
                format!("resource {key:?}: {unsupported}"),
            ));
        }
        context.publish(records).await?;
    }
    Ok(handle)
}

/// Reopens the recorded binding, or creates the resource and records its binding.
async fn open_or_create<D: ResourceDriver>(
    context: &ExecutionContext,
    driver: &D,
    view: &ResourceView,
) -> Result<D::Handle> {
    if let Some(binding) = &view.binding {
        let binding = serde_json::from_value(binding.clone()).map_err(|e| {
            Error::serde(
                &format!(
                    "the binding of resource {:?} does not fit its driver",
                    view.key
                ),
                e,
            )
        })?;
        return driver
            .open(binding)
            .await
            .map_err(|e| driver_failed(&view.key, "open", e));
    }
    let (handle, binding) = driver
        .create(view.checkpoint_ref.as_deref())
        .await
        .map_err(|e| driver_failed(&view.key, "create", e))?;
    let binding: Value = serde_json::to_value(binding)
        .map_err(|e| Error::serde("a resource binding is not JSON", e))?;
    context
        .kernel()
        .bind_resource(context.id(), &view.key, context.lease(), &binding)
        .await
        .map_err(|e| context.note(e))?;
    Ok(handle)
}

fn driver_failed(key: &str, what: &str, error: BoxError) -> Error {
    let kind = if error.downcast_ref::<CheckpointUnavailable>().is_some() {
        ErrorKind::CheckpointUnavailable
    } else {
        ErrorKind::Resource
    };
    Error::new(kind, format!("resource {key:?}: {what} failed: {error}")).with_source(error)
}
