//! Resource registration rules (PROTOCOL.md §1.9, §9 item 7: the newest docs win).

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::canonical;
use crate::error::KernelError;
use crate::event::{EventBody, Registered};
use crate::store::{ExecState, Resource, canonical_text};
use rebuno::wire::ResourceView;

/// Longest resource key.
const MAX_KEY: usize = 128;

/// The interval of a registration that omits `every_steps`: every affecting step (Go:
/// TestForkAtACapturedOutcomeLogsItsCheckpoint). An explicit 0 still means "never": both
/// SDKs send it for a resource without a checkpoint policy.
const DEFAULT_EVERY_STEPS: i64 = 1;

/// `POST /v0/executions/{id}/resources` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RegisterRequest {
    #[serde(default)]
    pub(crate) key: String,
    #[serde(default)]
    pub(crate) driver_id: String,
    #[serde(default)]
    pub(crate) configuration: Option<Box<RawValue>>,
    #[serde(default)]
    pub(crate) coverage_reuse: Option<bool>,
    #[serde(default)]
    pub(crate) every_steps: Option<i64>,
    #[serde(default)]
    pub(crate) on_completion: Option<bool>,
}

/// A validated registration.
#[derive(Debug)]
pub(super) struct Registration {
    key: String,
    driver_id: String,
    configuration: Option<Value>,
    configuration_canonical: String,
    coverage_reuse: bool,
    every_steps: u64,
    on_completion: Option<bool>,
}

/// `^[A-Za-z0-9_.-]{1,128}$`.
pub(crate) fn valid_key(key: &str) -> bool {
    (1..=MAX_KEY).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

impl RegisterRequest {
    /// Checks the key, driver and interval; canonicalizes the configuration.
    pub(super) fn validate(self) -> Result<Registration, KernelError> {
        if !valid_key(&self.key) {
            return Err(KernelError::validation("invalid resource key"));
        }
        if self.driver_id.trim().is_empty() {
            return Err(KernelError::validation("driver_id is required"));
        }
        let every_steps = u64::try_from(self.every_steps.unwrap_or(DEFAULT_EVERY_STEPS))
            .map_err(|_| KernelError::validation("every_steps must not be negative"))?;
        let configuration = match &self.configuration {
            Some(raw) => Some(canonical(raw, "configuration")?),
            None => None,
        };
        let configuration_canonical = canonical_text(configuration.as_ref());
        Ok(Registration {
            key: self.key,
            driver_id: self.driver_id,
            configuration,
            configuration_canonical,
            coverage_reuse: self.coverage_reuse.unwrap_or(false),
            every_steps,
            on_completion: self.on_completion,
        })
    }
}

impl Registration {
    /// `on_completion` for a positive interval: as sent, else true.
    fn on_completion(&self) -> bool {
        self.every_steps > 0 && self.on_completion.unwrap_or(true)
    }

    fn registered(self) -> Registered {
        let on_completion = self.on_completion();
        Registered {
            key: self.key,
            driver_id: self.driver_id,
            configuration: self.configuration,
            coverage_reuse: self.coverage_reuse,
            every_steps: self.every_steps,
            on_completion,
        }
    }
}

/// The `resource.registered` payload of an existing resource.
pub(crate) fn registration_of(resource: &Resource) -> Registered {
    Registered {
        key: resource.key.clone(),
        driver_id: resource.driver_id.clone(),
        configuration: resource.configuration.clone(),
        coverage_reuse: resource.coverage_reuse,
        every_steps: resource.every_steps,
        on_completion: resource.on_completion,
    }
}

/// Registers a new resource, or re-registers an existing one: identity fields must match
/// (`409`); the policy of the first registration stays, whatever a later one asks for (Go:
/// TestRepeatedRegistrationKeepsItsPolicyAndRefusesAnotherDriverOrCapability).
pub(super) fn apply(
    state: &mut ExecState,
    registration: Registration,
) -> Result<ResourceView, KernelError> {
    let key = registration.key.clone();
    let Some(existing) = state.resources.get(&key) else {
        let registered = registration.registered();
        state.record(EventBody::ResourceRegistered(registered));
        tracing::debug!(execution = %state.exec.id, %key, "resource registered");
        return view(state, &key);
    };
    if existing.driver_id != registration.driver_id
        || existing.configuration_canonical != registration.configuration_canonical
        || existing.coverage_reuse != registration.coverage_reuse
    {
        return Err(KernelError::conflict(format!(
            "resource {key:?} is registered with a different driver, configuration or coverage_reuse"
        )));
    }
    view(state, &key)
}

fn view(state: &ExecState, key: &str) -> Result<ResourceView, KernelError> {
    state
        .resources
        .get(key)
        .map(Resource::view)
        .ok_or_else(|| KernelError::Internal("resource vanished".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert!(valid_key("workspace"));
        assert!(valid_key("a.b-c_9"));
        assert!(valid_key(&"k".repeat(128)));
        assert!(!valid_key(&"k".repeat(129)));
        assert!(!valid_key(""));
        assert!(!valid_key("a/b"));
        assert!(!valid_key("é"));
    }

    fn registration(every: u64, on_completion: Option<bool>) -> Registration {
        Registration {
            key: "k".into(),
            driver_id: "d".into(),
            configuration: None,
            configuration_canonical: "null".into(),
            coverage_reuse: false,
            every_steps: every,
            on_completion,
        }
    }

    #[test]
    fn on_completion_defaults_to_true_only_with_an_interval() {
        assert!(registration(2, None).on_completion());
        assert!(!registration(2, Some(false)).on_completion());
        assert!(!registration(0, None).on_completion());
        assert!(!registration(0, Some(true)).on_completion());
    }
}
