//! [`E2bSandbox`]: E2B sandboxes as a resource, checkpointed by E2B snapshots. The overview,
//! with examples, is in the [parent module](super).

mod api;
mod commands;
mod config;
mod connect;
mod encoding;
mod envd;
mod error;
#[cfg(test)]
mod fake;
mod files;
mod handle;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use self::commands::{CommandOutput, RunOptions};
pub use self::config::E2bSandbox;
pub use self::error::{E2bError, E2bErrorKind};
pub use self::files::{Entry, EntryKind};
pub use self::handle::Sandbox;
use crate::context::Suspension;
use crate::error::BoxError;
use crate::resource::{CheckpointUnavailable, ResourceDriver};

/// Where an [`E2bSandbox`] resource is: the sandbox's id. What the kernel stores for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxBinding {
    /// The sandbox's id, e.g. `"i3kvjd4xq7m2ab9s0fe1"`.
    pub sandbox_id: String,
}

impl ResourceDriver for E2bSandbox {
    type Handle = Sandbox;
    type Binding = SandboxBinding;

    fn driver_id(&self) -> String {
        "rebuno.e2b.v1".to_owned()
    }

    /// The template and the sandbox lifetime (never the key or the URLs).
    fn configuration(&self) -> Value {
        json!({ "template": self.template_id(), "timeout_ms": self.lifetime_ms() })
    }

    fn coverage_reuse(&self) -> bool {
        self.coverage_reuse_on()
    }

    async fn create(
        &self,
        checkpoint: Option<&str>,
    ) -> Result<(Sandbox, SandboxBinding), BoxError> {
        let api = self.api()?;
        let template = checkpoint.unwrap_or(self.template_id());
        let info = match api.create(template, self.lifetime_secs()).await {
            Ok(info) => info,
            Err(error) => return Err(unavailable_or(checkpoint, error)),
        };
        let binding = SandboxBinding {
            sandbox_id: info.sandbox_id.clone(),
        };
        tracing::debug!(sandbox = %binding.sandbox_id, template, "E2B sandbox created");
        let envd = self.envd(&api, info);
        Ok((Sandbox::new(api, envd), binding))
    }

    async fn open(&self, binding: SandboxBinding) -> Result<Sandbox, BoxError> {
        let api = self.api()?;
        let info = api
            .connect(&binding.sandbox_id, self.lifetime_secs())
            .await?;
        let envd = self.envd(&api, info);
        Ok(Sandbox::new(api, envd))
    }

    /// Takes a snapshot, then connects again (a snapshot drops the sandbox's connections) and
    /// refreshes the handle in place.
    async fn checkpoint(&self, handle: &Sandbox) -> Result<String, BoxError> {
        let api = handle.api();
        let snapshot = api.snapshot(handle.sandbox_id()).await?;
        let info = api
            .connect(handle.sandbox_id(), self.lifetime_secs())
            .await?;
        handle.refresh(self.envd(api, info));
        tracing::debug!(sandbox = %handle.sandbox_id(), %snapshot, "E2B snapshot taken");
        Ok(snapshot)
    }

    /// Pauses the sandbox when [`E2bSandbox::pause_while_waiting`] is on and the execution
    /// waits ([`Suspension::Blocked`], [`Suspension::DeadlineReached`]); a sandbox already
    /// paused is fine.
    async fn suspend(&self, handle: &Sandbox, why: Suspension) -> Result<(), BoxError> {
        let waits = matches!(why, Suspension::Blocked | Suspension::DeadlineReached);
        if self.pauses_while_waiting() && waits {
            handle.api().pause(handle.sandbox_id()).await?;
            tracing::debug!(sandbox = %handle.sandbox_id(), ?why, "E2B sandbox paused");
        }
        Ok(())
    }
}

/// A failed create: [`CheckpointUnavailable`] when it was from a snapshot the API does not
/// have (404), else the error itself.
fn unavailable_or(checkpoint: Option<&str>, error: E2bError) -> BoxError {
    match checkpoint {
        Some(snapshot) if error.kind() == E2bErrorKind::NotFound => Box::new(
            CheckpointUnavailable(format!("E2B has no snapshot {snapshot:?} ({error})")),
        ),
        _ => Box::new(error),
    }
}
