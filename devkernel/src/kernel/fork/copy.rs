//! Copying a source's settled prefix into a fork: its settled steps' events with rewritten
//! step ids (same occurrence, so the rerun replays them), and the prefix's resource
//! registrations. Applying the copied events rebuilds the step rows.

use std::collections::{BTreeSet, HashMap};

use super::restore::SeqMap;
use crate::event::{EventBody, EventKind, Recorded};
use crate::identity;
use crate::model::StepStatus;
use crate::store::ExecState;

/// Events that settle a step for the purpose of copying.
const SETTLING: [EventKind; 3] = [
    EventKind::StepSucceeded,
    EventKind::StepFailed,
    EventKind::StepDenied,
];

/// Steps settled (`succeeded|failed|denied`) by an event at or before `at_seq`.
fn settled(src: &ExecState, at_seq: u64) -> BTreeSet<String> {
    src.events
        .iter()
        .filter(|e| e.event_seq <= at_seq && SETTLING.contains(&e.kind()))
        .filter_map(|e| e.step().map(|s| s.step_id.clone()))
        .filter(|id| {
            src.steps.get(id).is_some_and(|s| {
                matches!(
                    s.status,
                    StepStatus::Succeeded | StepStatus::Failed | StepStatus::Denied
                )
            })
        })
        .collect()
}

/// The fork's id of each settled step of the source.
fn renamed(state: &ExecState, src: &ExecState, at_seq: u64) -> HashMap<String, String> {
    let fork_id = state.exec.id.to_string();
    settled(src, at_seq)
        .into_iter()
        .filter_map(|old| {
            let step = src.steps.get(&old)?;
            let new = identity::step_id(
                &fork_id,
                &step.kind,
                &step.target,
                &step.args_hash,
                step.occurrence,
            );
            Some((old, new))
        })
        .collect()
}

/// Copies, in source order, the settled steps' `step.*` events (not rate-limit refusals)
/// and the prefix's `resource.registered` / `reconfigured` / `initialized` events. Returns
/// where source seqs land in the fork.
pub(super) fn prefix(state: &mut ExecState, src: &ExecState, at_seq: u64) -> SeqMap {
    let renamed = renamed(state, src, at_seq);
    let fork = state.exec.id;
    let base = state.latest_seq();
    let (copied, copies): (Vec<u64>, Vec<EventBody>) = src
        .events
        .iter()
        .take_while(|e| e.event_seq <= at_seq)
        .filter_map(|event| Some((event.event_seq, copy(event, &renamed, fork)?)))
        .unzip();
    state.record_all(copies);
    SeqMap { base, copied }
}

/// The fork's copy of one source event, if it is copied.
fn copy(
    event: &Recorded,
    renamed: &HashMap<String, String>,
    fork: uuid::Uuid,
) -> Option<EventBody> {
    match &event.body {
        EventBody::ResourceRegistered(_)
        | EventBody::ResourceReconfigured(_)
        | EventBody::ResourceInitialized(_) => Some(event.body.clone()),
        EventBody::StepRateLimited(_) => None,
        _ => {
            let new_id = renamed.get(&event.step()?.step_id)?;
            let mut body = event.body.clone();
            if let Some(step) = Recorded::step_mut(&mut body) {
                step.step_id.clone_from(new_id);
            }
            if let EventBody::StepProposed(proposed) = &mut body
                && let Some(record) = &mut proposed.record
            {
                record.step_id.clone_from(new_id);
                record.execution_id = fork;
            }
            Some(body)
        }
    }
}
