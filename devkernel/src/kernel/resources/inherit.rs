//! Session turns inherit the completed parent's registrations and bindings
//! (PROTOCOL.md §1.7): generation and count restart at 0, no checkpoint is carried over.

use serde_json::json;
use uuid::Uuid;

use super::register::registered_payload;
use crate::kernel::Kernel;
use crate::store::{ExecState, Resource};

impl Kernel {
    /// The parent's resources, reset for a new turn.
    pub(crate) fn inheritable_resources(&self, parent: Uuid) -> Vec<Resource> {
        let Some(cell) = self.store().execution(parent) else {
            return Vec::new();
        };
        let state = cell.lock();
        state.resources.values().map(fresh_copy).collect()
    }
}

/// A copy without history: generation 0, count 0, no checkpoints.
pub(crate) fn fresh_copy(resource: &Resource) -> Resource {
    Resource {
        generation: 0,
        count: 0,
        initial_ref: None,
        checkpoints: Vec::new(),
        ..resource.clone()
    }
}

/// Registers inherited resources: `resource.registered`, then `resource.bound` when bound.
pub(crate) fn inherit(state: &mut ExecState, resources: Vec<Resource>) {
    for mut resource in resources {
        resource.registered_seq =
            state.append("resource.registered", registered_payload(&resource));
        if let Some(binding) = &resource.binding {
            state.append(
                "resource.bound",
                json!({"key": resource.key, "binding": binding}),
            );
        }
        state.resources.insert(resource.key.clone(), resource);
    }
}
