//! One method per agent route of the kernel (PROTOCOL.md §2.6).

use bytes::Bytes;
use http::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::base_url::encode_segment;
use super::{Call, KernelClient, Lease, Replayable};
use crate::error::{Error, ErrorKind, Result};
use crate::wire::{Captures, Execution, ResourceView, StepDecision};

/// The body of a step's `complete` or `fail`: its outcome, and the captures beside it. Borrowed,
/// so a step's result is serialized straight into the request, not copied into a `Value` first.
#[derive(Serialize)]
struct Settlement<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a Value>,
    #[serde(flatten)]
    captures: &'a Captures,
}

impl<'a> Settlement<'a> {
    fn result(result: &'a Value, captures: &'a Captures) -> Self {
        let result = Some(result);
        Self {
            result,
            error: None,
            captures,
        }
    }

    fn error(error: &'a Value, captures: &'a Captures) -> Self {
        let error = Some(error);
        Self {
            result: None,
            error,
            captures,
        }
    }
}

/// The body of an execution's `complete`, borrowed like [`Settlement`].
#[derive(Serialize)]
struct Completion<'a> {
    output: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<&'a Value>,
}

/// What a step is, as submitted to the kernel.
#[derive(Debug, Serialize)]
pub(crate) struct StepSubmission<'a> {
    pub(crate) kind: &'a str,
    pub(crate) target: &'a str,
    pub(crate) args: &'a Value,
    pub(crate) idempotency: &'a str,
    pub(crate) resources: &'a [String],
}

impl KernelClient {
    pub(crate) async fn get_execution(&self, execution_id: &str) -> Result<Execution> {
        let path = format!("/v0/executions/{}", encode_segment(execution_id));
        self.read(&path).await
    }

    /// The state (or output) of the previous execution of the session.
    pub(crate) async fn previous_state(&self, execution_id: &str) -> Result<Value> {
        let path = format!("/v0/executions/{}/previous", encode_segment(execution_id));
        let body: Value = self.read(&path).await?;
        Ok(body.get("state").cloned().unwrap_or(Value::Null))
    }

    pub(crate) async fn submit_step(
        &self,
        execution_id: &str,
        lease: &Lease,
        step: &StepSubmission<'_>,
    ) -> Result<StepDecision> {
        let path = format!("/v0/executions/{}/steps", encode_segment(execution_id));
        let body = encode(step)?;
        self.write(&path, body, lease, Replayable::OnlyIfUnseen)
            .await
    }

    pub(crate) async fn complete_step(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        result: &Value,
        captures: &Captures,
    ) -> Result<StepDecision> {
        let body = Settlement::result(result, captures);
        self.settle_step(execution_id, step_id, "complete", lease, &body)
            .await
    }

    pub(crate) async fn fail_step(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        error: &Value,
        captures: &Captures,
    ) -> Result<StepDecision> {
        let body = Settlement::error(error, captures);
        self.settle_step(execution_id, step_id, "fail", lease, &body)
            .await
    }

    /// Publishes a live delta of an executing step. Best-effort: sent once, never retried.
    pub(crate) async fn stream_delta(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        seq: u64,
        data: &str,
    ) -> Result<()> {
        let path = format!(
            "/v0/executions/{}/steps/{}/stream",
            encode_segment(execution_id),
            encode_segment(step_id)
        );
        let call = Call {
            method: Method::POST,
            path: &path,
            body: encode(&json!({ "seq": seq, "data": data }))?,
            lease: Some(lease),
            replayable: Replayable::Never,
            pace: None,
        };
        self.send(call).await.map(drop)
    }

    /// Registers (or re-registers) a resource and returns the kernel's view of it.
    pub(crate) async fn register_resource(
        &self,
        execution_id: &str,
        lease: &Lease,
        registration: &Value,
    ) -> Result<ResourceView> {
        let path = format!("/v0/executions/{}/resources", encode_segment(execution_id));
        self.write(&path, encode(registration)?, lease, Replayable::Yes)
            .await
    }

    /// Records where a resource is.
    pub(crate) async fn bind_resource(
        &self,
        execution_id: &str,
        key: &str,
        lease: &Lease,
        binding: &Value,
    ) -> Result<()> {
        let path = format!(
            "/v0/executions/{}/resources/{}/binding",
            encode_segment(execution_id),
            encode_segment(key)
        );
        self.mutate(&path, encode(&json!({ "binding": binding }))?, lease)
            .await
    }

    /// Publishes checkpoints taken outside a step outcome.
    pub(crate) async fn publish_checkpoints(
        &self,
        execution_id: &str,
        lease: &Lease,
        captures: &Captures,
    ) -> Result<()> {
        let path = format!(
            "/v0/executions/{}/resources/checkpoints",
            encode_segment(execution_id)
        );
        self.mutate(&path, encode(captures)?, lease).await
    }

    async fn settle_step(
        &self,
        execution_id: &str,
        step_id: &str,
        verb: &str,
        lease: &Lease,
        body: &Settlement<'_>,
    ) -> Result<StepDecision> {
        let path = format!(
            "/v0/executions/{}/steps/{}/{verb}",
            encode_segment(execution_id),
            encode_segment(step_id)
        );
        self.write(&path, encode(body)?, lease, Replayable::Yes)
            .await
    }

    /// Renews `lease`, retrying at the lease's own pace ([`Lease::renewal`]): a kernel back
    /// from an outage hears the renewal before the lease runs out.
    pub(crate) async fn heartbeat(&self, execution_id: &str, lease: &Lease) -> Result<()> {
        let path = format!("/v0/executions/{}/heartbeat", encode_segment(execution_id));
        let call = Call {
            method: Method::POST,
            path: &path,
            body: Bytes::new(),
            lease: Some(lease),
            replayable: Replayable::Yes,
            pace: Some(lease.renewal(self.inner.exchange.timeout)),
        };
        self.send(call).await.map(drop)
    }

    pub(crate) async fn complete_execution(
        &self,
        execution_id: &str,
        lease: &Lease,
        output: &Value,
        state: Option<&Value>,
    ) -> Result<()> {
        let path = format!("/v0/executions/{}/complete", encode_segment(execution_id));
        let body = Completion {
            output,
            state: state.filter(|state| !state.is_null()),
        };
        self.mutate(&path, encode(&body)?, lease).await
    }

    pub(crate) async fn fail_execution(
        &self,
        execution_id: &str,
        lease: &Lease,
        reason: &str,
    ) -> Result<()> {
        let path = format!("/v0/executions/{}/fail", encode_segment(execution_id));
        self.mutate(&path, encode(&json!({ "error": reason }))?, lease)
            .await
    }

    /// Publishes the agent's description and schemas.
    pub(crate) async fn set_metadata(&self, agent_id: &str, metadata: &Value) -> Result<()> {
        let path = format!("/v0/agents/{}/metadata", encode_segment(agent_id));
        let call = Call {
            method: Method::PUT,
            path: &path,
            body: encode(metadata)?,
            lease: None,
            // One try: the run waits on it, and a failure is tried again on the next dispatch.
            replayable: Replayable::Never,
            pace: None,
        };
        self.send(call).await.map(drop)
    }

    async fn read<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        let call = Call {
            method: Method::GET,
            path,
            body: Bytes::new(),
            lease: None,
            replayable: Replayable::Yes,
            pace: None,
        };
        decode(self.send(call).await?.body())
    }

    async fn write<T: DeserializeOwned>(
        &self,
        path: &str,
        body: Bytes,
        lease: &Lease,
        replayable: Replayable,
    ) -> Result<T> {
        let call = Call {
            method: Method::POST,
            path,
            body,
            lease: Some(lease),
            replayable,
            pace: None,
        };
        decode(self.send(call).await?.body())
    }

    async fn mutate(&self, path: &str, body: Bytes, lease: &Lease) -> Result<()> {
        let call = Call {
            method: Method::POST,
            path,
            body,
            lease: Some(lease),
            replayable: Replayable::Yes,
            pace: None,
        };
        self.send(call).await.map(drop)
    }
}

/// A request body, floats spelled as the Python SDK spells them (see `floats`).
fn encode(value: &impl Serialize) -> Result<Bytes> {
    super::floats::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| Error::serde("could not encode a kernel request", e))
}

fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T> {
    serde_json::from_slice(body)
        .map_err(|e| Error::new(ErrorKind::Protocol, "unexpected kernel response").with_source(e))
}

impl KernelClient {
    /// The recorded step, or `None` when the kernel has no such step.
    pub(crate) async fn get_step(
        &self,
        execution_id: &str,
        step_id: &str,
    ) -> Result<Option<crate::wire::StepRecord>> {
        let path = format!(
            "/v0/executions/{}/steps/{}",
            encode_segment(execution_id),
            encode_segment(step_id)
        );
        match self.read(&path).await {
            Ok(step) => Ok(Some(step)),
            Err(e) if e.code() == Some("not_found") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Asks the kernel to suspend the execution while its steps wait; returns whether it did.
    pub(crate) async fn suspend(&self, execution_id: &str, lease: &Lease) -> Result<bool> {
        let path = format!("/v0/executions/{}/suspend", encode_segment(execution_id));
        let body: Value = self
            .write(&path, Bytes::new(), lease, Replayable::Yes)
            .await?;
        Ok(body
            .get("suspended")
            .and_then(Value::as_bool)
            .unwrap_or(false))
    }
}
