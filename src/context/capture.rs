//! Taking checkpoints: due after a step, a baseline when nothing covers the start, and on
//! completion; and telling the drivers how the dispatch ended.

use super::{DispatchEnd, ExecutionContext, Suspension};
use crate::error::Result;
use crate::panic::catch_panic;
use crate::wire::{Capture, CaptureFailure, Captures, ResourceGeneration};

impl ExecutionContext {
    /// Checkpoints each due resource; failures (a driver's error or panic) are reported, never
    /// raised.
    pub(crate) async fn capture(&self, due: &[ResourceGeneration]) -> Captures {
        let mut records = Captures::default();
        for entry in due {
            let outcome = match self.resource(&entry.key) {
                Some(resource) => match catch_panic(resource.checkpoint()).await {
                    Ok(taken) => taken.map_err(|e| e.to_string()),
                    Err(panic) => Err(format!("checkpoint panicked: {panic}")),
                },
                None => Err("resource() was not called in this dispatch".to_owned()),
            };
            match outcome {
                Ok(checkpoint_ref) => {
                    records.captures.push(Capture {
                        key: entry.key.clone(),
                        generation: entry.generation,
                        checkpoint_ref,
                    });
                }
                Err(error) => {
                    tracing::warn!(key = entry.key.as_str(), %error, "checkpoint failed");
                    records.capture_failures.push(CaptureFailure {
                        key: entry.key.clone(),
                        generation: entry.generation,
                        error,
                    });
                }
            }
        }
        records
    }

    /// Captures `due` and publishes the result outside any step outcome.
    pub(crate) async fn publish_captures(&self, due: &[ResourceGeneration]) -> Result<()> {
        let records = self.capture(due).await;
        self.publish(records).await
    }

    /// Publishes captures taken outside any step outcome.
    pub(crate) async fn publish(&self, records: Captures) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        self.kernel()
            .publish_checkpoints(self.id(), self.lease(), &records)
            .await
            .map_err(|e| self.note(e))
    }

    /// On normal completion: captures every resource whose policy asks for it and that no
    /// checkpoint covers. A failure leaves the resource uncovered and is only logged.
    pub(crate) async fn checkpoint_on_completion(&self) -> Result<()> {
        let resources = self.resources();
        if resources.is_empty() {
            return Ok(());
        }
        let _exclusive = self.exclusive_always().await;
        let mut due = Vec::new();
        for resource in resources {
            let registration = resource.registration().to_json();
            let view = self
                .kernel()
                .register_resource(self.id(), self.lease(), &registration)
                .await
                .map_err(|e| self.note(e))?;
            if view.on_completion && !view.covered {
                due.push(ResourceGeneration {
                    key: view.key,
                    generation: view.generation,
                    due: true,
                });
            }
        }
        self.publish_captures(&due).await
    }

    /// At the end of a dispatch: tells each resource's driver how it ended, unless a newer
    /// delivery took over (it owns the resources now). A driver's error is only logged.
    pub(crate) async fn release_resources(&self, end: DispatchEnd) {
        if end == DispatchEnd::Suspended(Suspension::LeaseSuperseded) {
            return;
        }
        for resource in self.resources() {
            let failure = match catch_panic(resource.release(end)).await {
                Ok(Ok(())) => continue,
                Ok(Err(error)) => error.to_string(),
                Err(panic) => format!("release panicked: {panic}"),
            };
            tracing::warn!(
                resource = resource.key(),
                ?end,
                error = failure,
                "the resource driver's release failed; the resource stays as it was"
            );
        }
    }
}
