//! Session turns inherit the completed parent's registrations and bindings
//! (PROTOCOL.md §1.7): generation and count restart at 0, no checkpoint is carried over.
//! Only a turn whose parent ran in the same session inherits: a branch from a named parent
//! into a new session and a fork start with no resources (Go:
//! TestSessionResourceBindingsStayWithinTheirAgentAndSession).

use uuid::Uuid;

use super::register::registration_of;
use crate::event::{Bound, EventBody};
use crate::kernel::Kernel;
use crate::store::{ExecState, Resource};

impl Kernel {
    /// The resources a turn of `session` inherits from `parent`: all of them when the parent
    /// ran in that session, none otherwise.
    pub(crate) fn inheritable_resources(&self, parent: Uuid, session: &str) -> Vec<Resource> {
        let Some(cell) = self.store().execution(parent) else {
            return Vec::new();
        };
        let state = cell.lock();
        if state.exec.session.as_deref() != Some(session) {
            return Vec::new();
        }
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
