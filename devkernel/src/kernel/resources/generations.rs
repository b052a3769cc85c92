//! Generations and counts: what a live step start and a step settlement do to resources
//! (PROTOCOL.md §1.9 "Generation", "Count").

use std::collections::BTreeMap;

use crate::model::{StepRecord, StepResource};
use crate::store::ExecState;

/// The LLM step kind: its declared resources are ignored and it never counts.
pub(crate) const LLM_CALL: &str = "llm_call";

/// The declared resources a step keeps (none for `llm_call`), sorted and deduplicated.
pub(crate) fn declared(kind: &str, resources: &[String]) -> Vec<String> {
    if kind == LLM_CALL {
        return Vec::new();
    }
    let mut keys = resources.to_vec();
    keys.sort();
    keys.dedup();
    keys
}

/// Keys a live start of `step` affects: its declared resources plus every resource with
/// `coverage_reuse = false`, restricted to registered keys.
pub(crate) fn affected(state: &ExecState, step: &StepRecord) -> Vec<String> {
    let mut keys: Vec<String> = state
        .resources
        .values()
        .filter(|r| !r.coverage_reuse || step.resources.contains(&r.key))
        .map(|r| r.key.clone())
        .collect();
    keys.sort();
    keys
}

/// Bumps the generation of each key; returns the decision entries and the `generations`
/// map for `step.executing`. `due` is only set for steps that count (not `llm_call`, which
/// never captures).
pub(crate) fn bump(
    state: &mut ExecState,
    keys: &[String],
    counts: bool,
) -> (Vec<StepResource>, BTreeMap<String, u64>) {
    let mut touched = Vec::new();
    let mut generations = BTreeMap::new();
    for key in keys {
        if let Some(resource) = state.resources.get_mut(key) {
            resource.generation += 1;
            generations.insert(key.clone(), resource.generation);
            touched.push(StepResource {
                key: key.clone(),
                generation: resource.generation,
                due: counts && resource.due(),
            });
        }
    }
    (touched, generations)
}

/// Ends checkpoint coverage of each key at the `step.executing` seq.
pub(crate) fn invalidate(state: &mut ExecState, keys: &[String], seq: u64) {
    for key in keys {
        if let Some(resource) = state.resources.get_mut(key) {
            resource.invalidate(seq);
        }
    }
}

/// Counts a settled affecting step (succeeded, failed or cancelled after running).
pub(crate) fn count_settled(state: &mut ExecState, step_id: &str) {
    let Some(step) = state.steps.get(step_id) else {
        return;
    };
    if step.kind == LLM_CALL {
        return;
    }
    let keys = step.resources.clone();
    for key in keys {
        if let Some(resource) = state.resources.get_mut(&key) {
            resource.count += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llm_calls_declare_nothing() {
        let keys = ["b".to_owned(), "a".to_owned(), "b".to_owned()];
        assert_eq!(declared("tool_call", &keys), ["a", "b"]);
        assert!(declared(LLM_CALL, &keys).is_empty());
    }
}
