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
use crate::resource::{CheckpointUnavailable, DispatchEnd, ResourceDriver};

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

    /// The template (never the key or the URLs). Not the lifetime: it is an operating
    /// setting, and the kernel refuses an execution whose configuration changed, so raising it
    /// in a redeploy must not fail the executions in flight.
    fn configuration(&self) -> Value {
        json!({ "template": self.template_id() })
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
        Ok((Sandbox::new(self, api, envd), binding))
    }

    async fn open(&self, binding: SandboxBinding) -> Result<Sandbox, BoxError> {
        let api = self.api()?;
        let info = match api.connect(&binding.sandbox_id, self.lifetime_secs()).await {
            Ok(info) => info,
            Err(error) if error.kind() == E2bErrorKind::NotFound => {
                let note = format!(
                    "the sandbox is gone: killed, or past its lifetime (E2bSandbox::timeout, {} s)",
                    self.lifetime_secs()
                );
                return Err(error.noting(&note).into());
            }
            Err(error) => return Err(error.into()),
        };
        let envd = self.envd(&api, info);
        Ok(Sandbox::new(self, api, envd))
    }

    /// Takes a snapshot, then connects again (a snapshot drops the sandbox's connections) and
    /// refreshes the handle in place. The snapshot counts once taken: a failed reconnect is
    /// only logged (the handle reconnects on its next call that finds the sandbox unreachable).
    async fn checkpoint(&self, handle: &Sandbox) -> Result<String, BoxError> {
        let api = handle.api();
        let snapshot = api.snapshot(handle.sandbox_id()).await?;
        match api.connect(handle.sandbox_id(), self.lifetime_secs()).await {
            Ok(info) => handle.refresh(self.envd(api, info)),
            Err(error) => tracing::warn!(
                sandbox = %handle.sandbox_id(),
                %error,
                "reconnecting after the E2B snapshot failed; the snapshot stands"
            ),
        }
        tracing::debug!(sandbox = %handle.sandbox_id(), %snapshot, "E2B snapshot taken");
        Ok(snapshot)
    }

    /// Pauses the sandbox when [`E2bSandbox::pause_while_waiting`] is on and the execution
    /// waits ([`Suspension::Blocked`]: an approval, its subagents, a rate limit); kills it when
    /// [`E2bSandbox::kill_when_done`] is on and the execution is done (completed, failed, or
    /// ended elsewhere). A sandbox already paused or gone is fine. Nothing at a host deadline
    /// ([`Suspension::DeadlineReached`]): the next delivery comes within the lease, sooner than
    /// a pause pays off, and the pause would run in the host's last seconds.
    async fn release(&self, handle: &Sandbox, end: DispatchEnd) -> Result<(), BoxError> {
        let done = matches!(
            end,
            DispatchEnd::Completed
                | DispatchEnd::Failed
                | DispatchEnd::Suspended(Suspension::Terminated)
        );
        if self.kills_when_done() && done {
            handle.kill().await?;
            tracing::debug!(sandbox = %handle.sandbox_id(), ?end, "E2B sandbox killed");
        } else if self.pauses_while_waiting() && end == DispatchEnd::Suspended(Suspension::Blocked)
        {
            handle.api().pause(handle.sandbox_id()).await?;
            tracing::debug!(sandbox = %handle.sandbox_id(), "E2B sandbox paused");
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
