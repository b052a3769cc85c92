//! Forks (PROTOCOL.md §1.8): a new execution that replays the source's settled prefix and
//! runs the rest live, with resources restored from checkpoints.

mod copy;
mod restore;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use uuid::Uuid;

use super::create::{non_empty, valid_label};
use super::{Kernel, Principal};
use crate::error::KernelError;
use crate::event::{EventBody, Forked};
use rebuno::wire::ForkPoints;

use crate::model::{ExecutionRow, Timestamp};
use crate::policy::Policy;
use crate::store::{ExecCell, ExecState, Recorder};

/// `POST /v0/executions/{id}/fork` body.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ForkRequest {
    #[serde(default)]
    pub(crate) at_seq: i64,
    #[serde(default)]
    pub(crate) session: Option<String>,
    #[serde(default)]
    pub(crate) policy_bundle: Option<String>,
}

impl ForkRequest {
    /// Whether the fork overrides the policy (needs `policies:write`).
    pub(crate) fn overrides_policy(&self) -> bool {
        self.policy_bundle.as_deref().is_some_and(|b| !b.is_empty())
    }
}

/// The fork's projection of the source at creation.
fn fork_execution(
    source: &ExecutionRow,
    id: Uuid,
    at_seq: u64,
    session: Option<String>,
    created: Timestamp,
) -> ExecutionRow {
    let input = source.input.clone();
    ExecutionRow {
        session,
        parent_execution_id: source.parent_execution_id,
        forked_from: Some(source.id),
        fork_seq: Some(at_seq),
        on_behalf_of: source.on_behalf_of.clone(),
        ..ExecutionRow::pending(id, source.agent_id.clone(), input, created)
    }
}

/// A compiled `policy_bundle` override (`400` when it does not compile).
fn parse_override(bundle: Option<&str>) -> Result<Option<Arc<Policy>>, KernelError> {
    match bundle.filter(|b| !b.is_empty()) {
        Some(yaml) => Policy::parse(yaml)
            .map(|p| Some(Arc::new(p)))
            .map_err(|e| KernelError::validation(e.to_string())),
        None => Ok(None),
    }
}

/// The fork's state with its prefix written, and the restoration plan.
fn build(
    src: &ExecState,
    id: Uuid,
    at_seq: i64,
    session: Option<String>,
    override_policy: Option<Arc<Policy>>,
    recorder: Recorder,
) -> Result<(ExecState, BTreeMap<String, restore::Restored>), KernelError> {
    let at_seq = u64::try_from(at_seq)
        .ok()
        .filter(|s| (1..=src.latest_seq()).contains(s))
        .ok_or_else(|| KernelError::validation("at_seq out of range"))?;
    let exec = fork_execution(&src.exec, id, at_seq, session, recorder.clock.timestamp());
    let mut state = ExecState::create(exec, recorder);
    let overridden = override_policy.is_some();
    let policy = override_policy.or_else(|| src.policy.clone());
    let restoration = restore::plan(src, at_seq);
    state.record(EventBody::ExecutionForked(Forked {
        source_execution_id: src.exec.id,
        fork_seq: at_seq,
        policy_override: overridden,
        restoration: (!restoration.is_empty()).then(|| {
            restoration
                .iter()
                .map(|(k, r)| (k.clone(), r.restoration.clone()))
                .collect()
        }),
        policy_bundle: policy.map(|p| p.yaml().to_owned()),
    }));
    let seqs = copy::prefix(&mut state, src, at_seq);
    restore::apply(&mut state, src, &restoration, at_seq, &seqs);
    Ok((state, restoration))
}

/// The response form: the execution plus `restoration` when any resource was restored.
fn with_restoration(
    mut exec: ExecutionRow,
    restoration: BTreeMap<String, restore::Restored>,
) -> ExecutionRow {
    if !restoration.is_empty() {
        exec.restoration = Some(
            restoration
                .into_iter()
                .map(|(key, r)| (key, r.restoration))
                .collect(),
        );
    }
    exec
}

impl Kernel {
    /// A fork's session must be a valid label no execution uses yet (`400`, `409`).
    fn check_new_session(&self, session: Option<&str>) -> Result<(), KernelError> {
        let Some(name) = session else {
            return Ok(());
        };
        if !valid_label(name) {
            return Err(KernelError::validation("invalid session"));
        }
        if self.sessions().exists(name) {
            return Err(KernelError::conflict(format!(
                "session {name:?} already has executions"
            )));
        }
        Ok(())
    }

    /// Forks `source` at `at_seq`; the response carries `restoration`.
    pub(crate) fn fork(
        &self,
        source: Uuid,
        principal: &Principal,
        request: ForkRequest,
    ) -> Result<ExecutionRow, KernelError> {
        let cell = self.cell(source, principal)?;
        let session = non_empty(request.session);
        self.check_new_session(session.as_deref())?;
        let override_policy = parse_override(request.policy_bundle.as_deref())?;
        let id = Uuid::now_v7();
        let (state, restoration) = build(
            &cell.lock(),
            id,
            request.at_seq,
            session.clone(),
            override_policy,
            self.recorder().clone(),
        )?;
        self.store()
            .insert_execution(Arc::new(ExecCell::new(state)));
        let admitted = session
            .as_deref()
            .is_none_or(|name| self.sessions().admit(name, id));
        if admitted {
            let followups = self.start_execution(id);
            self.run(followups);
        }
        tracing::info!(execution = %id, source = %source, "execution forked");
        let exec = self.execution(id, &Principal::Admin)?;
        Ok(with_restoration(exec, restoration))
    }

    /// `GET .../fork-points`: the latest seq, resource registrations and checkpoints.
    pub(crate) fn fork_points(
        &self,
        id: Uuid,
        principal: &Principal,
    ) -> Result<ForkPoints, KernelError> {
        let cell = self.cell(id, principal)?;
        let state = cell.lock();
        let mut points = ForkPoints::default();
        points.latest_seq = state.latest_seq();
        let resources = state.resources.values();
        points.resources = resources
            .clone()
            .map(|r| (r.key.clone(), r.registered_seq))
            .collect();
        points.checkpoints = resources.flat_map(|r| r.checkpoint_views()).collect();
        Ok(points)
    }
}
