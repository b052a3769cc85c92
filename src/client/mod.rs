//! The client API: create, inspect, cancel and fork executions; resolve approvals; register
//! agents, set and test their policy bundles, and manage scoped API keys.

mod agents;
mod api_keys;
mod builder;
mod decide;
#[cfg(test)]
mod fake;
mod listings;
mod policies;
mod requests;
mod stream;
mod unauthorized;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use self::agents::{AgentRecord, RegisterAgent};
pub use self::api_keys::{ApiKey, CreateApiKey, IssuedApiKey, Scope};
pub use self::builder::ClientBuilder;
pub use self::decide::Decide;
use self::decide::Verdict;
pub use self::listings::{ListApprovals, ListSteps};
pub use self::policies::{
    ExecutionSelector, PolicyCase, PolicyCaseResult, PolicyDecision, PolicyReport, TestPolicy,
};
pub use self::requests::{CreateExecution, Fork, ListExecutions};
pub use self::stream::{DeltaStream, StepDelta};
use self::unauthorized::KeySource;
use crate::Secret;
use crate::error::{Error, ErrorKind, Result};
use crate::kernel::{BaseUrl, Exchange, KernelClient, Replayable, encode_segment};
use crate::wire::{Approval, Event, Execution, ForkPoints, StepRecord};

/// A client of the kernel's client API, authenticated with a bearer token (an API key or the
/// bootstrap token; none for a dev kernel).
///
/// Cheap to clone.
///
/// ```no_run
/// # async fn demo() -> rebuno::Result<()> {
/// let client = rebuno::client::Client::builder().base_url("http://127.0.0.1:8080").build()?;
/// let execution = client.create("hello").input(serde_json::json!({"name": "Ada"})).send().await?;
/// let done = client.wait(&execution.id, std::time::Duration::from_secs(60)).await?;
/// println!("{:?}", done.output);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    base: BaseUrl,
    token: Option<Secret>,
    /// Where `token` came from, named when the kernel refuses it.
    key_source: KeySource,
    exchange: Exchange,
}

impl Client {
    /// A client of the kernel an agent talks to, authenticated with `REBUNO_API_KEY` (for
    /// subagents started without a client of their own).
    pub(crate) fn of_agent(kernel: &KernelClient) -> Self {
        let (base, exchange) = kernel.connection();
        Self::from_parts(base, unauthorized::api_key(None), exchange)
    }

    /// A client of the kernel at `base` with `key` (the token and where it came from).
    fn from_parts(base: BaseUrl, key: (Option<Secret>, KeySource), exchange: Exchange) -> Self {
        let (token, key_source) = key;
        Self {
            inner: Arc::new(Inner {
                base,
                token,
                key_source,
                exchange,
            }),
        }
    }

    /// Starts configuring a client (`REBUNO_URL` and `REBUNO_API_KEY` are the defaults).
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// Starts creating an execution of `agent_id`; finish with [`CreateExecution::send`].
    pub fn create(&self, agent_id: impl Into<String>) -> CreateExecution {
        CreateExecution::new(self.clone(), agent_id.into())
    }

    /// One execution.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Api`] with code `not_found` for an unknown id; network errors.
    pub async fn get(&self, execution_id: &str) -> Result<Execution> {
        self.read(&format!("/v0/executions/{}", encode_segment(execution_id)))
            .await
    }

    /// What a session's execution reads with [`previous()`](crate::previous): the state (or
    /// output) of the execution before it in the session, `null` for the first.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Api`] with code `not_found` for an unknown id; network errors.
    pub async fn previous(&self, execution_id: &str) -> Result<serde_json::Value> {
        let path = format!("/v0/executions/{}/previous", encode_segment(execution_id));
        let answer: serde_json::Value = self.read(&path).await?;
        Ok(answer
            .get("state")
            .cloned()
            .unwrap_or(serde_json::Value::Null))
    }

    /// Starts listing executions; finish with [`ListExecutions::send`].
    pub fn list(&self) -> ListExecutions {
        ListExecutions::new(self.clone())
    }

    /// Events of an execution after `after_seq` (0 for all), at most `limit` (kernel default 100).
    ///
    /// # Errors
    ///
    /// Unknown execution, network errors.
    pub async fn events(
        &self,
        execution_id: &str,
        after_seq: u64,
        limit: Option<u32>,
    ) -> Result<Vec<Event>> {
        let mut path = format!("/v0/executions/{}/events", encode_segment(execution_id));
        let mut query = Vec::new();
        if after_seq > 0 {
            query.push(format!("after_seq={after_seq}"));
        }
        if let Some(limit) = limit {
            query.push(format!("limit={limit}"));
        }
        if !query.is_empty() {
            path = format!("{path}?{}", query.join("&"));
        }
        self.read_list(&path).await
    }

    /// The whole event log of an execution, page by page.
    ///
    /// # Errors
    ///
    /// As [`events`](Self::events).
    pub async fn all_events(&self, execution_id: &str) -> Result<Vec<Event>> {
        let mut all: Vec<Event> = Vec::new();
        loop {
            let after = all.last().map_or(0, |e| e.event_seq);
            let page = self.events(execution_id, after, Some(1000)).await?;
            if page.is_empty() {
                return Ok(all);
            }
            all.extend(page);
        }
    }

    /// Cancels an execution (its live subagents too).
    ///
    /// # Errors
    ///
    /// `conflict` when it is already terminal; `not_found`.
    pub async fn cancel(&self, execution_id: &str) -> Result<()> {
        let path = format!("/v0/executions/{}/cancel", encode_segment(execution_id));
        self.send(Method::POST, &path, None, Replayable::Yes)
            .await
            .map(drop)
    }

    /// Forks an execution at event `at_seq`: copied steps replay, the rest runs live. Finish
    /// with [`Fork::send`]; a session or another policy bundle are optional.
    pub fn fork(&self, execution_id: impl Into<String>, at_seq: u64) -> Fork {
        Fork::new(self.clone(), execution_id.into(), at_seq)
    }

    /// Where an execution can be forked and which checkpoints cover which events.
    ///
    /// # Errors
    ///
    /// `not_found`; network errors.
    pub async fn fork_points(&self, execution_id: &str) -> Result<ForkPoints> {
        self.read(&format!(
            "/v0/executions/{}/fork-points",
            encode_segment(execution_id)
        ))
        .await
    }

    /// The recorded steps of an execution; finish with [`ListSteps::send`].
    pub fn steps(&self, execution_id: impl Into<String>) -> ListSteps {
        ListSteps::new(self.clone(), execution_id.into())
    }

    /// One step, or `None` if the execution has no such step.
    ///
    /// # Errors
    ///
    /// Network errors.
    pub async fn step(&self, execution_id: &str, step_id: &str) -> Result<Option<StepRecord>> {
        let path = format!(
            "/v0/executions/{}/steps/{}",
            encode_segment(execution_id),
            encode_segment(step_id)
        );
        not_found_as_none(self.read(&path).await)
    }

    /// Approvals, the pending ones unless [`ListApprovals::status`] says otherwise; finish
    /// with [`ListApprovals::send`].
    pub fn approvals(&self) -> ListApprovals {
        ListApprovals::new(self.clone())
    }

    /// One approval.
    ///
    /// # Errors
    ///
    /// `not_found`; network errors.
    pub async fn approval(&self, approval_id: &str) -> Result<Approval> {
        self.read(&format!("/v0/approvals/{}", encode_segment(approval_id)))
            .await
    }

    /// Grants an approval, the step then runs when the execution resumes; finish with
    /// [`Decide::send`], after [`Decide::by`] (who decides) and [`Decide::rationale`].
    ///
    /// ```no_run
    /// # async fn demo(client: rebuno::client::Client, approval_id: &str) -> rebuno::Result<()> {
    /// client.grant(approval_id).by("alice").rationale("recipient checked").send().await?;
    /// # Ok(()) }
    /// ```
    pub fn grant(&self, approval_id: impl Into<String>) -> Decide {
        Decide::new(self.clone(), approval_id.into(), Verdict::Grant)
    }

    /// Denies an approval, the step's call then returns the denial; finish with
    /// [`Decide::send`].
    pub fn deny(&self, approval_id: impl Into<String>) -> Decide {
        Decide::new(self.clone(), approval_id.into(), Verdict::Deny)
    }

    /// Polls until the execution is completed, failed or cancelled.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Timeout`] when `timeout` passes first; errors of [`get`](Self::get).
    pub async fn wait(&self, execution_id: &str, timeout: Duration) -> Result<Execution> {
        let mut waited = Duration::ZERO;
        let mut pause = Duration::from_millis(50);
        loop {
            let execution = self.get(execution_id).await?;
            if execution.status.is_terminal() {
                return Ok(execution);
            }
            if waited >= timeout {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "execution {execution_id} still {:?} after {timeout:?}",
                        execution.status
                    ),
                ));
            }
            self.inner.exchange.runtime.sleep(pause).await;
            waited += pause;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    pub(crate) async fn read<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        decode(
            self.send(Method::GET, path, None, Replayable::Yes)
                .await?
                .body(),
        )
    }

    /// Reads a list the kernel may render as `null` when empty.
    pub(crate) async fn read_list<T: DeserializeOwned>(&self, path: &str) -> Result<Vec<T>> {
        let list: Option<Vec<T>> = self.read(path).await?;
        Ok(list.unwrap_or_default())
    }

    pub(crate) async fn write<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T> {
        decode(
            self.send(Method::POST, path, Some(encode(body)?), Replayable::Yes)
                .await?
                .body(),
        )
    }

    /// [`write`](Self::write) with a `traceparent` header.
    pub(crate) async fn write_traced<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
        traceparent: Option<&str>,
    ) -> Result<T> {
        let body = Some(encode(body)?);
        let traceparent = traceparent.and_then(|t| http::HeaderValue::from_str(t).ok());
        let response = self
            .inner
            .exchange
            .send(Replayable::Yes, || {
                let mut request = self.build(Method::POST, path, body.clone())?;
                if let Some(value) = &traceparent {
                    request.headers_mut().insert("traceparent", value.clone());
                }
                Ok(request)
            })
            .await
            .map_err(|error| self.explain(error))?;
        decode(response.body())
    }

    pub(super) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        replayable: Replayable,
    ) -> Result<http::Response<Bytes>> {
        self.inner
            .exchange
            .send(replayable, || {
                self.build(method.clone(), path, body.clone())
            })
            .await
            .map_err(|error| self.explain(error))
    }

    /// `error` with what to check when the kernel refused this client's API key (`401`).
    pub(super) fn explain(&self, error: Error) -> Error {
        unauthorized::explain(error, self.inner.key_source)
    }

    fn build(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<http::Request<Bytes>> {
        let target = self.inner.base.target(path);
        let mut builder = http::Request::builder()
            .method(method)
            .uri(self.inner.base.uri(&target));
        if body.is_some() {
            builder = builder.header(http::header::CONTENT_TYPE, "application/json");
        }
        if let Some(token) = &self.inner.token {
            let mut value = http::HeaderValue::from_bytes(&[b"Bearer ", token.expose()].concat())
                .map_err(|_| {
                Error::new(ErrorKind::Config, "API key is not a valid header value")
            })?;
            value.set_sensitive(true);
            builder = builder.header(http::header::AUTHORIZATION, value);
        }
        builder
            .body(body.unwrap_or_default())
            .map_err(|e| Error::new(ErrorKind::Config, "invalid client request").with_source(e))
    }
}

fn not_found_as_none<T>(result: Result<T>) -> Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.code() == Some("not_found") => Ok(None),
        Err(e) => Err(e),
    }
}

pub(super) fn encode(value: &impl Serialize) -> Result<Bytes> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| Error::serde("could not encode a client request", e))
}

fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T> {
    serde_json::from_slice(body)
        .map_err(|e| Error::new(ErrorKind::Protocol, "unexpected kernel response").with_source(e))
}

#[cfg(test)]
mod tests {
    use http::StatusCode;
    use serde_json::json;

    use super::fake::FakeKernel;

    #[tokio::test]
    async fn previous_reads_the_state_of_the_session_before() {
        let kernel = FakeKernel::answering(StatusCode::OK, r#"{"state":{"turn":1}}"#);
        assert_eq!(
            kernel.client().previous("e 1").await.unwrap(),
            json!({"turn": 1})
        );
        let seen = kernel.requests();
        assert_eq!(
            seen,
            [(
                "GET".to_owned(),
                "/v0/executions/e%201/previous".to_owned(),
                true
            )]
        );
        let first = FakeKernel::answering(StatusCode::OK, r#"{"state":null}"#);
        assert_eq!(first.client().previous("e").await.unwrap(), json!(null));
    }
}
