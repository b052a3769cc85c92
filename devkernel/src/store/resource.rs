//! A registered resource of one execution and its checkpoints (PROTOCOL.md §1.9).

use serde_json::Value;

use rebuno::wire::ResourceView;

/// One checkpoint a driver captured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Capture {
    /// The resource generation it captured.
    pub(crate) generation: u64,
    /// The driver's opaque reference.
    pub(crate) checkpoint_ref: String,
    /// First seq it covers (the outcome event, or the latest seq when published directly).
    pub(crate) covered_seq: u64,
    /// The `step.executing` seq that ended its coverage (in a fork's copy, where that
    /// start lands in the fork's log).
    pub(crate) invalidated_seq: Option<u64>,
}

impl Capture {
    /// Whether it describes the state at `seq`: `covered_seq <= seq < invalidated_seq`.
    pub(crate) fn covers(&self, seq: u64) -> bool {
        self.covered_seq <= seq && self.invalidated_seq.is_none_or(|end| seq < end)
    }
}

/// A registered resource.
#[derive(Debug, Clone)]
pub(crate) struct Resource {
    /// `^[A-Za-z0-9_.-]{1,128}$`.
    pub(crate) key: String,
    /// The driver that owns it.
    pub(crate) driver_id: String,
    /// Driver configuration (canonical form), `None` when absent or `null`.
    pub(crate) configuration: Option<Value>,
    /// Canonical JSON of `configuration` (`null` when absent), for conflict checks.
    pub(crate) configuration_canonical: String,
    /// Whether a checkpoint stays valid across steps that do not declare the resource.
    pub(crate) coverage_reuse: bool,
    /// Capture every N affecting steps; 0 disables checkpointing.
    pub(crate) every_steps: u64,
    /// Capture when the handler returns.
    pub(crate) on_completion: bool,
    /// Seq of its `resource.registered` event.
    pub(crate) registered_seq: u64,
    /// Bumped by every live step start that affects it.
    pub(crate) generation: u64,
    /// Settled affecting steps (not LLM, not denied, not replay).
    pub(crate) count: u64,
    /// The driver's binding, once bound.
    pub(crate) binding: Option<Value>,
    /// Canonical JSON of `binding`.
    pub(crate) binding_canonical: Option<String>,
    /// Checkpoint a fork restored it from (shown until the fork captures its own).
    pub(crate) initial_ref: Option<String>,
    /// Checkpoints, oldest first.
    pub(crate) checkpoints: Vec<Capture>,
}

impl Resource {
    /// Whether a valid checkpoint of the current generation exists.
    pub(crate) fn covered(&self) -> bool {
        self.checkpoints
            .iter()
            .any(|c| c.generation == self.generation && c.invalidated_seq.is_none())
    }

    /// Whether the next settled affecting step is due for a capture.
    pub(crate) fn due(&self) -> bool {
        self.every_steps > 0 && (self.count + 1).is_multiple_of(self.every_steps)
    }

    /// The newest checkpoint reference, else the one a fork restored.
    pub(crate) fn checkpoint_ref(&self) -> Option<String> {
        self.checkpoints
            .last()
            .map(|c| c.checkpoint_ref.clone())
            .or_else(|| self.initial_ref.clone())
    }

    /// Ends the coverage of every open checkpoint at `seq`.
    pub(crate) fn invalidate(&mut self, seq: u64) {
        for checkpoint in &mut self.checkpoints {
            if checkpoint.invalidated_seq.is_none() {
                checkpoint.invalidated_seq = Some(seq);
            }
        }
    }

    /// The wire view returned by registration.
    pub(crate) fn view(&self) -> ResourceView {
        let mut view = ResourceView::default();
        view.key.clone_from(&self.key);
        view.driver_id.clone_from(&self.driver_id);
        view.configuration = self.configuration.clone().unwrap_or_default();
        (view.coverage_reuse, view.on_completion) = (self.coverage_reuse, self.on_completion);
        (view.every_steps, view.registered_seq) = (self.every_steps, self.registered_seq);
        (view.generation, view.count) = (self.generation, self.count);
        view.binding.clone_from(&self.binding);
        view.checkpoint_ref = self.checkpoint_ref();
        view.covered = self.covered();
        view
    }

    /// The fork-points view of each checkpoint.
    pub(crate) fn checkpoint_views(&self) -> impl Iterator<Item = rebuno::wire::Checkpoint> + '_ {
        self.checkpoints.iter().map(|c| {
            let mut view = rebuno::wire::Checkpoint::default();
            view.key.clone_from(&self.key);
            (view.generation, view.covered_seq) = (c.generation, c.covered_seq);
            view.checkpoint_ref.clone_from(&c.checkpoint_ref);
            view.invalidated_seq = c.invalidated_seq;
            view
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint(covered: u64, invalidated: Option<u64>) -> Capture {
        Capture {
            generation: 1,
            checkpoint_ref: "r".into(),
            covered_seq: covered,
            invalidated_seq: invalidated,
        }
    }

    #[test]
    fn coverage_is_half_open() {
        let closed = checkpoint(5, Some(9));
        assert!(!closed.covers(4));
        assert!(closed.covers(5));
        assert!(closed.covers(8));
        assert!(!closed.covers(9));
        assert!(checkpoint(5, None).covers(1000));
    }
}
