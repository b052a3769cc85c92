//! Choosing how a fork restores each resource (PROTOCOL.md §1.8): the newest checkpoint
//! covering the fork point, else the newest earlier one, else the initial environment; and
//! writing where each resource starts and which checkpoints the fork keeps.

use std::collections::BTreeMap;

use crate::event::{Checkpointed, EventBody, Initialized};
use crate::model::Restoration;
use crate::store::{Capture, ExecState, Resource};

/// A restoration decision and the generation the fork's resource starts at.
#[derive(Debug, Clone)]
pub(super) struct Restored {
    /// The wire form.
    pub(super) restoration: Restoration,
    /// The source's generation at the fork point, plus one when uncovered: the restored
    /// state is not the one the copied steps produced.
    generation: u64,
}

/// Where source seqs land in the fork: the fork's seq of the last copied event at or before
/// a source seq (`base` when none).
#[derive(Debug)]
pub(super) struct SeqMap {
    /// The fork's latest seq before the copy.
    pub(super) base: u64,
    /// Source seqs of the copied events, ascending.
    pub(super) copied: Vec<u64>,
}

impl SeqMap {
    /// The fork's seq for source seq `seq`.
    fn map(&self, seq: u64) -> u64 {
        let before = self.copied.partition_point(|copied| *copied <= seq);
        self.base + u64::try_from(before).unwrap_or(u64::MAX - self.base)
    }
}

/// The restoration of one resource at `at_seq`.
fn choose(resource: &Resource, at_seq: u64) -> Restoration {
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
    Restoration {
        checkpoint_ref: checkpoint.map(|c| c.checkpoint_ref.clone()),
        checkpoint_seq: checkpoint.map(|c| c.covered_seq),
        covered,
    }
}

/// The generation of `key` after the source's events up to `at_seq`: the last
/// `resource.initialized` or `step.executing` that set it, else 0.
fn generation_at(src: &ExecState, key: &str, at_seq: u64) -> u64 {
    src.events
        .iter()
        .take_while(|e| e.event_seq <= at_seq)
        .fold(0, |generation, event| match &event.body {
            EventBody::ResourceInitialized(init) if init.key == key => init.generation,
            EventBody::StepExecuting(executing) => executing
                .generations
                .as_ref()
                .and_then(|bumped| bumped.get(key).copied())
                .unwrap_or(generation),
            _ => generation,
        })
}

/// Restorations of every resource registered at or before `at_seq`.
pub(super) fn plan(src: &ExecState, at_seq: u64) -> BTreeMap<String, Restored> {
    src.resources
        .values()
        .filter(|r| r.registered_seq <= at_seq)
        .map(|r| {
            let restoration = choose(r, at_seq);
            let generation = generation_at(src, &r.key, at_seq) + u64::from(!restoration.covered);
            (
                r.key.clone(),
                Restored {
                    restoration,
                    generation,
                },
            )
        })
        .collect()
}

/// The fork's copies of `resource`'s checkpoints covering from at or before `at_seq`, seqs
/// mapped into the fork; of several landing on one fork seq the newest stays. Coverage that
/// ended after the fork point is open again.
fn copies(resource: &Resource, at_seq: u64, seqs: &SeqMap) -> BTreeMap<u64, Capture> {
    let mut by_seq = BTreeMap::new();
    for checkpoint in resource
        .checkpoints
        .iter()
        .filter(|c| c.covered_seq <= at_seq)
    {
        let covered_seq = seqs.map(checkpoint.covered_seq);
        let invalidated_seq = checkpoint
            .invalidated_seq
            .filter(|end| *end <= at_seq)
            .map(|end| seqs.map(end));
        by_seq.insert(
            covered_seq,
            Capture {
                covered_seq,
                invalidated_seq,
                ..checkpoint.clone()
            },
        );
    }
    by_seq
}

/// Writes `resource.initialized` per restored resource, then a `resource.checkpointed` per
/// copied checkpoint (Go: TestForkAtACapturedOutcomeLogsItsCheckpoint).
pub(super) fn apply(
    state: &mut ExecState,
    src: &ExecState,
    plan: &BTreeMap<String, Restored>,
    at_seq: u64,
    seqs: &SeqMap,
) {
    for (key, restored) in plan {
        state.record(EventBody::ResourceInitialized(Initialized {
            key: key.clone(),
            generation: restored.generation,
            checkpoint_ref: restored.restoration.checkpoint_ref.clone(),
        }));
    }
    let copied: Vec<EventBody> = plan
        .keys()
        .filter_map(|key| src.resources.get(key))
        .flat_map(|resource| {
            copies(resource, at_seq, seqs)
                .into_values()
                .map(|c| (resource.key.clone(), c))
        })
        .map(|(key, c)| {
            EventBody::ResourceCheckpointed(Checkpointed {
                key,
                generation: c.generation,
                checkpoint_ref: c.checkpoint_ref,
                covered_seq: c.covered_seq,
                invalidated_seq: c.invalidated_seq,
            })
        })
        .collect();
    state.record_all(copied);
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
                .map(|&(generation, covered_seq, invalidated_seq)| Capture {
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
        let at = |seq| choose(&r, seq);
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

    #[test]
    fn copies_map_into_the_fork_and_keep_the_newest_per_seq() {
        // Source seqs 4 and 7 were copied to fork seqs 3 and 4 (base 2).
        let seqs = SeqMap {
            base: 2,
            copied: vec![4, 7],
        };
        assert_eq!(
            (seqs.map(3), seqs.map(4), seqs.map(6), seqs.map(9)),
            (2, 3, 3, 4)
        );
        let r = resource(&[
            (0, 4, Some(7)),
            (1, 5, Some(10)),
            (2, 6, None),
            (3, 12, None),
        ]);
        let kept: Vec<_> = copies(&r, 9, &seqs).into_values().collect();
        // c0 and c1/c2 land on fork seq 3: the newest (c2) stays; c1's end (10) is after
        // the fork point, so its copy would be open; c3 started after the fork point.
        assert_eq!(kept.len(), 1);
        assert_eq!(
            (
                kept[0].checkpoint_ref.as_str(),
                kept[0].covered_seq,
                kept[0].invalidated_seq
            ),
            ("c2", 3, None)
        );
        // A coverage that ended by the fork point ends at the mapped seq; after it, it is open.
        let alone = resource(&[(0, 4, Some(7))]);
        let ended: Vec<_> = copies(&alone, 8, &seqs).into_values().collect();
        assert_eq!(
            (ended[0].covered_seq, ended[0].invalidated_seq),
            (3, Some(4))
        );
        let open: Vec<_> = copies(&alone, 6, &seqs).into_values().collect();
        assert_eq!((open[0].covered_seq, open[0].invalidated_seq), (3, None));
    }
}
