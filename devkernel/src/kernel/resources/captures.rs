//! Checkpoint captures reported by the agent, and the refusals the kernel writes
//! (PROTOCOL.md §1.9 "Captures").

use std::collections::HashSet;

use serde::Deserialize;

use crate::event::{CheckpointFailed, Checkpointed, EventBody};
use crate::model::StepStatus;
use crate::store::ExecState;

/// One captured checkpoint.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Capture {
    #[serde(default)]
    pub(crate) key: String,
    #[serde(default)]
    pub(crate) generation: u64,
    #[serde(default)]
    pub(crate) checkpoint_ref: String,
}

/// One capture the driver could not take.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CaptureFailure {
    #[serde(default)]
    pub(crate) key: String,
    #[serde(default)]
    pub(crate) generation: u64,
    #[serde(default)]
    pub(crate) error: String,
}

/// `captures` and `capture_failures`, as sent with step outcomes or on their own.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Captures {
    #[serde(default)]
    pub(crate) captures: Option<Vec<Capture>>,
    #[serde(default)]
    pub(crate) capture_failures: Option<Vec<CaptureFailure>>,
}

/// Why a capture was refused, or `None` when it is accepted. `accepted` holds the keys this
/// batch already checkpointed: a second capture of one of them is a duplicate, while a
/// capture of a generation an earlier batch checkpointed is recorded again (Go:
/// TestForkKeepsTheNewestCheckpointAtTheSameCopiedBoundary).
fn refusal(
    state: &ExecState,
    capture: &Capture,
    accepted: &HashSet<String>,
) -> Option<&'static str> {
    let Some(resource) = state.resources.get(&capture.key) else {
        return Some("unknown_resource");
    };
    if capture.checkpoint_ref.is_empty() {
        return Some("missing_checkpoint_ref");
    }
    if accepted.contains(&capture.key) {
        return Some("duplicate_capture");
    }
    if capture.generation != resource.generation {
        return Some("stale_generation");
    }
    let writing = state
        .steps
        .values()
        .any(|s| s.status == StepStatus::Executing && s.resources.contains(&capture.key));
    writing.then_some("writers_active")
}

fn failed(state: &mut ExecState, key: &str, generation: u64, error: &str) {
    state.record(EventBody::ResourceCheckpointFailed(CheckpointFailed {
        key: key.to_owned(),
        generation,
        error: error.to_owned(),
    }));
}

/// Commits accepted captures as checkpoints covering from `covered_seq`, and writes
/// `resource.checkpoint_failed` for refusals and reported failures.
pub(crate) fn commit(state: &mut ExecState, records: Captures, covered_seq: u64) {
    let mut accepted = HashSet::new();
    for capture in records.captures.unwrap_or_default() {
        if let Some(reason) = refusal(state, &capture, &accepted) {
            tracing::debug!(key = %capture.key, reason, "checkpoint refused");
            failed(state, &capture.key, capture.generation, reason);
            continue;
        }
        accepted.insert(capture.key.clone());
        state.record(EventBody::ResourceCheckpointed(Checkpointed {
            key: capture.key,
            generation: capture.generation,
            checkpoint_ref: capture.checkpoint_ref,
            covered_seq,
            invalidated_seq: None,
        }));
    }
    for failure in records.capture_failures.unwrap_or_default() {
        let error = if failure.error.is_empty() {
            "capture_failed"
        } else {
            failure.error.as_str()
        };
        failed(state, &failure.key, failure.generation, error);
    }
}
