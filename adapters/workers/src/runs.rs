//! Which Durable Object instances of this isolate have runs under way.
//!
//! Keyed by the instance, not only by the object's id: an object can be evicted while its
//! isolate lives on, and the run it had never ends (its request context is gone). The instance
//! that replaces it, with the same id, must not count that run as its own, or its heartbeat
//! would beat for ever. Instances are told apart by their `DurableObjectState` (a new instance
//! gets a new one).

use std::cell::RefCell;

use wasm_bindgen::JsValue;
use worker::State;

/// One instance and its runs under way.
struct Instance {
    object: String,
    state: JsValue,
    runs: usize,
}

thread_local! {
    static INSTANCES: RefCell<Vec<Instance>> = const { RefCell::new(Vec::new()) };
}

/// The object's id, as the runtime names it.
pub(crate) fn object_id(state: &State) -> String {
    state
        .as_raw()
        .id()
        .and_then(|id| id.to_string())
        .unwrap_or_default()
}

/// What identifies this instance: its `DurableObjectState`.
pub(crate) fn instance(state: &State) -> JsValue {
    let raw: &JsValue = state.as_raw().as_ref();
    raw.clone()
}

fn same_instance(instance: &Instance, state: &JsValue) -> bool {
    js_sys::Object::is(&instance.state, state)
}

/// Counts a run of this instance in; an earlier instance of the same object is dead, so its
/// entry goes.
pub(crate) fn started(state: &State) {
    let object = object_id(state);
    let this = instance(state);
    INSTANCES.with(|instances| {
        let mut instances = instances.borrow_mut();
        instances.retain(|i| i.object != object || same_instance(i, &this));
        match instances.iter_mut().find(|i| same_instance(i, &this)) {
            Some(instance) => instance.runs += 1,
            None => instances.push(Instance {
                object,
                state: this,
                runs: 1,
            }),
        }
    });
}

/// Counts a run of the instance `this` out; returns how many are still under way.
pub(crate) fn ended(this: &JsValue) -> usize {
    INSTANCES.with(|instances| {
        let mut instances = instances.borrow_mut();
        let left = instances
            .iter_mut()
            .find(|i| same_instance(i, this))
            .map_or(0, |instance| {
                instance.runs = instance.runs.saturating_sub(1);
                instance.runs
            });
        instances.retain(|i| i.runs > 0);
        left
    })
}

/// How many runs of this instance are under way.
pub(crate) fn under_way(state: &State) -> usize {
    let this = instance(state);
    INSTANCES.with(|instances| {
        instances
            .borrow()
            .iter()
            .find(|i| same_instance(i, &this))
            .map_or(0, |instance| instance.runs)
    })
}
