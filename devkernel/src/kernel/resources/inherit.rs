//! Session turns inherit the completed parent's registrations and bindings
//! (PROTOCOL.md §1.7): generation and count restart at 0, no checkpoint is carried over.

use uuid::Uuid;

use super::register::registration_of;
use crate::event::{Bound, EventBody};
use crate::kernel::Kernel;
use crate::store::{ExecState, Resource};

impl Kernel {
    /// The parent's resources (their registrations and bindings are what a turn inherits).
    pub(crate) fn inheritable_resources(&self, parent: Uuid) -> Vec<Resource> {
        let Some(cell) = self.store().execution(parent) else {
            return Vec::new();
        };
        let state = cell.lock();
        state.resources.values().cloned().collect()
    }
}

/// Registers inherited resources afresh: `resource.registered`, then `resource.bound` when
/// bound.
pub(crate) fn inherit(state: &mut ExecState, resources: Vec<Resource>) {
    for resource in resources {
        state.record(EventBody::ResourceRegistered(registration_of(&resource)));
        if let Some(binding) = resource.binding {
            state.record(EventBody::ResourceBound(Bound {
                key: resource.key,
                binding,
            }));
        }
    }
}
