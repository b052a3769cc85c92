//! Copying a source's settled prefix into a fork: step rows with rewritten ids (same
//! occurrence, so the rerun replays them) and their events, plus resource registrations.

use std::collections::{BTreeSet, HashMap};

use serde_json::{Value, json};

use crate::identity;
use crate::model::StepStatus;
use crate::store::ExecState;

/// Events that settle a step for the purpose of copying.
const SETTLING: [&str; 3] = ["step.succeeded", "step.failed", "step.denied"];

fn step_of(payload: &Value) -> Option<&str> {
    payload.get("step_id").and_then(Value::as_str)
}

/// Steps settled (`succeeded|failed|denied`) by an event at or before `at_seq`.
fn settled(src: &ExecState, at_seq: u64) -> BTreeSet<String> {
    src.events
        .iter()
        .filter(|e| e.event_seq <= at_seq && SETTLING.contains(&e.kind.as_str()))
        .filter_map(|e| step_of(&e.payload).map(str::to_owned))
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

/// Copies settled steps and, in source order, their `step.*` events and the prefix's
/// `resource.registered` / `resource.initialized` events; registers the copied resources.
pub(super) fn prefix(state: &mut ExecState, src: &ExecState, at_seq: u64) {
    let fork_id = state.exec.id.to_string();
    let mut renamed = HashMap::new();
    for old in settled(src, at_seq) {
        let Some(step) = src.steps.get(&old) else {
            continue;
        };
        let mut copy = step.clone();
        copy.step_id = identity::step_id(
            &fork_id,
            &step.kind,
            &step.target,
            &step.args_hash,
            step.occurrence,
        );
        copy.execution_id = state.exec.id;
        renamed.insert(old, copy.step_id.clone());
        state.steps.insert(copy.step_id.clone(), copy);
    }
    for event in src.events.iter().take_while(|e| e.event_seq <= at_seq) {
        match event.kind.as_str() {
            "step.rate_limited" => {}
            kind if kind.starts_with("step.") => {
                let Some(new_id) = step_of(&event.payload).and_then(|id| renamed.get(id)) else {
                    continue;
                };
                let mut payload = event.payload.clone();
                payload["step_id"] = json!(new_id);
                state.append(kind, payload);
            }
            "resource.registered" => copy_registration(state, src, &event.payload),
            "resource.initialized" => {
                state.append("resource.initialized", event.payload.clone());
            }
            _ => {}
        }
    }
}

/// Copies one `resource.registered` event and registers a fresh copy of the resource.
fn copy_registration(state: &mut ExecState, src: &ExecState, payload: &Value) {
    let Some(key) = payload.get("key").and_then(Value::as_str) else {
        return;
    };
    let Some(resource) = src.resources.get(key) else {
        return;
    };
    let mut copy = crate::kernel::resources::fresh_copy(resource);
    copy.binding = None;
    copy.binding_canonical = None;
    copy.registered_seq = state.append("resource.registered", payload.clone());
    state.resources.insert(copy.key.clone(), copy);
}
