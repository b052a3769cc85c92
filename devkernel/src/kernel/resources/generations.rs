//! Which resources a step affects (PROTOCOL.md §1.9 "Generation"); what a live start and a
//! settlement then do to them is applying `step.executing` and the settling events.

use crate::model::StepRow;
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
pub(crate) fn affected(state: &ExecState, step: &StepRow) -> Vec<String> {
    let mut keys: Vec<String> = state
        .resources
        .values()
        .filter(|r| !r.coverage_reuse || step.resources.contains(&r.key))
        .map(|r| r.key.clone())
        .collect();
    keys.sort();
    keys
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
