//! Request builders of the [`Client`] with optional fields.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tracing::Instrument as _;

use super::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::wire::{Execution, ExecutionPage, ExecutionStatus, SpawnedBy};

/// An execution being created; finish with [`send`](Self::send). See [`Client::create`].
#[derive(Debug, Serialize)]
#[must_use = "call `send()` to create the execution"]
pub struct CreateExecution {
    #[serde(skip)]
    client: Client,
    agent_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    input: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent_execution_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    idempotency_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    spawned_by: Option<SpawnedBy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    on_behalf_of: Option<String>,
    #[serde(skip)]
    traceparent: Option<String>,
}

impl CreateExecution {
    pub(super) fn new(client: Client, agent_id: String) -> Self {
        Self {
            client,
            agent_id,
            input: None,
            session: None,
            parent_execution_id: None,
            idempotency_key: None,
            spawned_by: None,
            on_behalf_of: None,
            traceparent: None,
        }
    }

    /// The input handed to the agent's handler.
    pub fn input(mut self, input: Value) -> Self {
        self.input = Some(input);
        self
    }

    /// A session: executions of one session run one at a time, each continuing from the last.
    pub fn session(mut self, session: impl Into<String>) -> Self {
        self.session = Some(session.into());
        self
    }

    /// Continues a completed execution of the same agent: the new execution's
    /// [`previous()`](crate::previous) reads that execution's state (or output), as the next
    /// turn of its session would. Branches a conversation: edit or regenerate a turn of a
    /// chat by continuing the turn before it, in a new [`session`](Self::session) (optional,
    /// but it must not have executions yet).
    ///
    /// ```no_run
    /// # async fn demo(client: rebuno::client::Client, turn_before: &str) -> rebuno::Result<()> {
    /// // The user edits their last message: answer it again from the turn before it.
    /// let branch = client
    ///     .create("chat")
    ///     .parent_execution_id(turn_before)
    ///     .session("chat:u1:branch-2")
    ///     .input(serde_json::json!("what about tomorrow?"))
    ///     .send()
    ///     .await?;
    /// # let _ = branch; Ok(()) }
    /// ```
    ///
    /// [`send`](Self::send) fails with `409 conflict` when the parent is not a completed
    /// execution of this agent (or the kernel's retention already removed it), or when the
    /// session already has executions.
    pub fn parent_execution_id(mut self, execution_id: impl Into<String>) -> Self {
        self.parent_execution_id = Some(execution_id.into());
        self
    }

    /// A key that makes creation idempotent: the same key returns the same execution (the
    /// kernel keeps keys per agent; a repeated creation gets the first execution, whatever
    /// its other fields). A key is non-blank, at most 256 bytes, without NUL; the kernel
    /// frees it when its retention removes the execution.
    ///
    /// Inside a run (a handler, a tool or a step), a creation without a key gets one derived
    /// from the execution, the agent, the session, the input and how many such creations
    /// this delivery made before it: a re-delivery that creates again gets the executions the
    /// first one created, not duplicates. Set a key to choose otherwise.
    ///
    /// Outside a run, derive the key from the id of the request being served, which the
    /// caller's retries keep: a serverless front door invoked again for the same event (an
    /// asynchronous Lambda invocation keeps its request id over retries), or an HTTP endpoint
    /// taking its client's `Idempotency-Key` header. When one request creates several
    /// executions of the same agent, add what tells them apart.
    ///
    /// ```no_run
    /// # async fn demo(client: rebuno::client::Client, request_id: &str) -> rebuno::Result<()> {
    /// // A front door invoked again for the same request creates no second execution.
    /// let execution = client
    ///     .create("order-intake")
    ///     .input(serde_json::json!({"order": 42}))
    ///     .idempotency_key(format!("intake:{request_id}"))
    ///     .send()
    ///     .await?;
    /// # let _ = execution; Ok(()) }
    /// ```
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Makes this a subagent execution of a parent's tool step, which must be executing;
    /// [`subagent`](crate::subagent()) sets it for you inside a tool. Without a key of its
    /// own, the kernel makes the creation idempotent on the step, so a re-delivered step
    /// gets the child it created before.
    pub fn spawned_by(
        mut self,
        execution_id: impl Into<String>,
        step_id: impl Into<String>,
    ) -> Self {
        self.spawned_by = Some(SpawnedBy {
            execution_id: execution_id.into(),
            step_id: step_id.into(),
        });
        self
    }

    /// The end-user subject the execution acts for (recorded on it as `on_behalf_of`; an
    /// empty subject is none).
    pub fn on_behalf_of(mut self, subject: impl Into<String>) -> Self {
        self.on_behalf_of = Some(subject.into());
        self
    }

    /// The caller's W3C trace context (the `traceparent` of the request being served, say):
    /// sent as the create request's `traceparent` header, and, with feature
    /// `opentelemetry`, a link from the execution's trace back to it. A value that is not a
    /// W3C `traceparent` is ignored.
    pub fn traceparent(mut self, traceparent: impl Into<String>) -> Self {
        let value = traceparent.into();
        self.traceparent = crate::spans::is_traceparent(&value).then_some(value);
        self
    }

    /// Creates the execution, inside a [`rebuno.create`](crate::spans::CREATE) span.
    ///
    /// # Errors
    ///
    /// `not_found` for an unknown agent; `validation_error` for a bad session or key;
    /// `conflict` for a parent execution that cannot be continued
    /// ([`parent_execution_id`](Self::parent_execution_id)); network errors.
    pub async fn send(mut self) -> Result<Execution> {
        if self.idempotency_key.is_none()
            && self.spawned_by.is_none()
            && let Some(context) = crate::context::current()
        {
            let key =
                context.creation_key(&self.agent_id, self.session.as_deref(), self.input.as_ref());
            self.idempotency_key = Some(key);
        }
        let span = tracing::info_span!(
            "rebuno.create",
            agent_id = self.agent_id.as_str(),
            traceparent = self.traceparent.as_deref(),
            execution_id = tracing::field::Empty,
        );
        let created: Result<Execution> = self
            .client
            .write_traced("/v0/executions", &self, self.traceparent.as_deref())
            .instrument(span.clone())
            .await;
        if let Ok(execution) = &created {
            span.record("execution_id", execution.id.as_str());
        }
        created
    }
}

impl CreateExecution {
    /// Creates the execution, waits up to `timeout` for it to end, and returns its output as
    /// `T`: a durable agent called like a function.
    ///
    /// ```no_run
    /// # async fn demo(client: rebuno::client::Client) -> rebuno::Result<()> {
    /// use std::time::Duration;
    /// let summary: String = client
    ///     .create("summarizer")
    ///     .input(serde_json::json!({ "url": "https://example.com" }))
    ///     .run(Duration::from_secs(60))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::ExecutionFailed`] when it failed or was cancelled (the reason in
    /// [`Error::reason`]); [`ErrorKind::Timeout`] when it is still going after `timeout` (it
    /// goes on; the message names it); [`ErrorKind::Serde`] when the output does not fit `T`;
    /// the errors of [`send`](Self::send).
    pub async fn run<T: DeserializeOwned>(self, timeout: Duration) -> Result<T> {
        let client = self.client.clone();
        let created = self.send().await?;
        let ended = client.wait(&created.id, timeout).await?;
        output_of(ended)
    }
}

/// The output of an execution that ended, or why there is none.
fn output_of<T: DeserializeOwned>(execution: Execution) -> Result<T> {
    let id = execution.id;
    let ended = |how: &str, reason: String| {
        let message = if reason.is_empty() {
            format!("execution {id} {how}")
        } else {
            format!("execution {id} {how}: {reason}")
        };
        Err(Error::new(ErrorKind::ExecutionFailed, message).with_reason(reason))
    };
    match execution.status {
        ExecutionStatus::Completed => {
            serde_json::from_value(execution.output.unwrap_or(Value::Null))
                .map_err(|e| Error::serde("the execution's output does not fit its type", e))
        }
        ExecutionStatus::Failed => ended("failed", execution.failure_reason),
        ExecutionStatus::Cancelled => ended("was cancelled", execution.failure_reason),
        status => Err(Error::new(
            ErrorKind::Protocol,
            format!("execution {id} is {status:?}, not ended"),
        )),
    }
}

/// A filtered, paged listing; finish with [`send`](Self::send). See [`Client::list`].
#[derive(Debug)]
#[must_use = "call `send()` to list"]
pub struct ListExecutions {
    client: Client,
    query: Vec<(&'static str, String)>,
}

impl ListExecutions {
    pub(super) fn new(client: Client) -> Self {
        Self {
            client,
            query: Vec::new(),
        }
    }

    /// Only executions of this agent.
    pub fn agent_id(self, agent_id: impl Into<String>) -> Self {
        self.with("agent_id", agent_id.into())
    }

    /// Only executions of this session.
    pub fn session(self, session: impl Into<String>) -> Self {
        self.with("session", session.into())
    }

    /// Only executions with this status.
    pub fn status(self, status: ExecutionStatus) -> Self {
        let text = serde_json::to_value(status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        self.with("status", text)
    }

    /// Continue after this cursor ([`ExecutionPage::next_cursor`]).
    pub fn cursor(self, cursor: impl Into<String>) -> Self {
        self.with("cursor", cursor.into())
    }

    /// Page size (kernel default 50, at most 200).
    pub fn limit(self, limit: u32) -> Self {
        self.with("limit", limit.to_string())
    }

    fn with(mut self, key: &'static str, value: String) -> Self {
        self.query.push((key, value));
        self
    }

    /// Fetches one page, newest first.
    ///
    /// # Errors
    ///
    /// `validation_error` for a bad cursor or limit; network errors.
    pub async fn send(self) -> Result<ExecutionPage> {
        let query: Vec<String> = self
            .query
            .iter()
            .map(|(k, v)| format!("{k}={}", crate::kernel::encode_segment(v)))
            .collect();
        let path = if query.is_empty() {
            "/v0/executions".to_owned()
        } else {
            format!("/v0/executions?{}", query.join("&"))
        };
        self.client.read(&path).await
    }
}

/// A fork being made; finish with [`send`](Self::send). See [`Client::fork`].
#[derive(Debug)]
#[must_use = "call `send()` to fork"]
pub struct Fork {
    client: Client,
    execution_id: String,
    at_seq: u64,
    session: Option<String>,
    policy_bundle: Option<String>,
}

impl Fork {
    pub(super) fn new(client: Client, execution_id: String, at_seq: u64) -> Self {
        Self {
            client,
            execution_id,
            at_seq,
            session: None,
            policy_bundle: None,
        }
    }

    /// Runs the fork in this session.
    pub fn session(mut self, session: impl Into<String>) -> Self {
        self.session = Some(session.into());
        self
    }

    /// Runs the fork under another policy bundle.
    pub fn policy_bundle(mut self, bundle: impl Into<String>) -> Self {
        self.policy_bundle = Some(bundle.into());
        self
    }

    /// Creates the fork.
    ///
    /// # Errors
    ///
    /// `validation_error` for a seq out of range; `conflict` for a used session; `not_found`.
    pub async fn send(self) -> Result<Execution> {
        let path = format!(
            "/v0/executions/{}/fork",
            crate::kernel::encode_segment(&self.execution_id)
        );
        let mut body = json!({ "at_seq": self.at_seq });
        if let Some(session) = self.session {
            body["session"] = json!(session);
        }
        if let Some(bundle) = self.policy_bundle {
            body["policy_bundle"] = json!(bundle);
        }
        self.client.write(&path, &body).await
    }
}
