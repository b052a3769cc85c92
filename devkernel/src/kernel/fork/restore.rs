//! Choosing how a fork restores each resource (PROTOCOL.md §1.8): the newest checkpoint
//! covering the fork point, else the newest earlier one, else the initial environment.

use std::collections::BTreeMap;

use crate::event::{Checkpointed, EventBody, Initialized};
use crate::model::Restoration;
use crate::store::{Checkpoint, ExecState, Resource};

/// A restoration decision and the checkpoint it picked.
#[derive(Debug, Clone)]
pub(super) struct Restored {
    /// The wire form.
    pub(super) restoration: Restoration,
    /// The chosen checkpoint.
    checkpoint: Option<Checkpoint>,
}

/// The restoration of one resource at `at_seq`.
fn choose(resource: &Resource, at_seq: u64) -> Restored {
    let newest = |covering: bool| {
        resource
            .checkpoints
            .iter()
            .filter(|c| c.covered_seq <= at_seq && (!covering || c.covers(at_seq)))
            .max_by_key(|c| c.covered_seq)
    };
    let (checkpoint, covered) = match newest(true) {
        Some(c) => (Some(c), true),
        None => (newest(false), false),
    };
    Restored {
        restoration: Restoration {
            checkpoint_ref: checkpoint.map(|c| c.checkpoint_ref.clone()),
            checkpoint_seq: checkpoint.map(|c| c.covered_seq),
            covered,
        },
        checkpoint: checkpoint.cloned(),
    }
}

/// Restorations of every resource registered at or before `at_seq`.
pub(super) fn plan(src: &ExecState, at_seq: u64) -> BTreeMap<String, Restored> {
    src.resources
        .values()
        .filter(|r| r.registered_seq <= at_seq)
        .map(|r| (r.key.clone(), choose(r, at_seq)))
        .collect()
}

/// Writes `resource.initialized` per restored resource, then a copied
/// `resource.checkpointed` for each covering checkpoint (covering from that event's seq).
pub(super) fn apply(state: &mut ExecState, plan: &BTreeMap<String, Restored>) {
    for (key, restored) in plan {
        state.record(EventBody::ResourceInitialized(Initialized {
            key: key.clone(),
            generation: restored.checkpoint.as_ref().map_or(0, |c| c.generation),
            checkpoint_ref: restored.restoration.checkpoint_ref.clone(),
        }));
    }
    for (key, restored) in plan {
        let Some(checkpoint) = restored
            .checkpoint
            .as_ref()
            .filter(|_| restored.restoration.covered)
        else {
            continue;
        };
        let seq = state.latest_seq() + 1;
        state.record(EventBody::ResourceCheckpointed(Checkpointed {
            key: key.clone(),
            generation: checkpoint.generation,
            checkpoint_ref: checkpoint.checkpoint_ref.clone(),
            covered_seq: seq,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(checkpoints: &[(u64, u64, Option<u64>)]) -> Resource {
        Resource {
            key: "k".into(),
            driver_id: "d".into(),
            configuration: None,
            configuration_canonical: "null".into(),
            coverage_reuse: true,
            every_steps: 1,
            on_completion: true,
            registered_seq: 1,
            generation: 9,
            count: 0,
            binding: None,
            binding_canonical: None,
            initial_ref: None,
            checkpoints: checkpoints
                .iter()
                .map(|&(generation, covered_seq, invalidated_seq)| Checkpoint {
                    generation,
                    checkpoint_ref: format!("c{generation}"),
                    covered_seq,
                    invalidated_seq,
                })
                .collect(),
        }
    }

    #[test]
    fn newest_covering_then_newest_earlier_then_initial() {
        let r = resource(&[(0, 3, Some(6)), (1, 8, Some(12)), (2, 9, None)]);
        let at = |seq| choose(&r, seq).restoration;
        assert_eq!(
            at(2),
            Restoration {
                checkpoint_ref: None,
                checkpoint_seq: None,
                covered: false
            }
        );
        assert_eq!(at(4).checkpoint_ref.as_deref(), Some("c0"));
        assert!(at(4).covered);
        // c0 ended at 6; nothing covers 7: the newest earlier one, not covered.
        let seven = at(7);
        assert_eq!(
            (seven.checkpoint_ref.as_deref(), seven.covered),
            (Some("c0"), false)
        );
        // Both c1 and c2 cover 10: the newest wins.
        let ten = at(10);
        assert_eq!(
            (
                ten.checkpoint_ref.as_deref(),
                ten.checkpoint_seq,
                ten.covered
            ),
            (Some("c2"), Some(9), true)
        );
    }
}
