//! Replay checking: run today's handler against an execution recorded yesterday, offline, and
//! see whether it would replay it or part from it.
//!
//! In Rebuno a step's identity is its kind, target, canonical args and occurrence. When a new
//! build asks for a step the history lacks (a changed prompt, a renamed tool, an extra
//! argument), that step does not replay: it runs live again, and an LLM call is billed twice
//! or an email sent twice. [`check`] finds this before a deploy does:
//!
//! * it serves the agent a dispatch of the recorded execution and answers every kernel call
//!   from the [`History`], with no kernel and no network;
//! * a step the history has is replayed (result, error, denial) exactly as a kernel would;
//! * a step it lacks, or one the kernel would run again, is stopped before its body runs, so
//!   a check has no side effects beyond the handler's own code outside steps;
//! * the [`ReplayReport`] names the first divergent step beside the recorded one expected
//!   there, every step that would run live (flagging `at_most_once` ones), the recorded steps
//!   never reached, and whether the outcome matches;
//! * [`ReplayReport::dangerous_steps`] counts the `at_most_once` steps that may take effect
//!   twice: the live ones, and the recorded ones after a divergence. The check stops at the
//!   first live step, so it cannot see whether the new code asks for those again with the
//!   same args: a changed lookup whose result feeds a reply makes a re-delivery send the
//!   reply again, to whoever the new lookup finds.
//!
//! ```no_run
//! use rebuno::{Agent, HandlerError, step};
//! use rebuno_devkernel::replay::{self, History};
//!
//! async fn hello(name: String) -> Result<String, HandlerError> {
//!     Ok(step("greet", move || async move { Ok::<_, HandlerError>(format!("hello, {name}")) }).await?)
//! }
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let history = History::from_json(&std::fs::read_to_string("histories/hello-1.json")?)?;
//! let report = replay::check(Agent::builder("hello").handler(hello), &history).await?;
//! assert!(report.is_clean(), "{report}");
//! # Ok(()) }
//! ```
//!
//! # Before a deploy
//!
//! Export recent executions from the kernel the old build served, and replay them against the
//! new build in `cargo test`:
//!
//! ```sh
//! for id in $(rebuno-dev exec list --agent hello --status completed --ids | head -n 20); do
//!   rebuno-dev exec export "$id" > "tests/histories/$id.json"
//! done
//! cargo test --test replay   # each file: History::from_json, replay::check, assert is_clean
//! ```
//!
//! A divergence in a completed execution says the new code would not have recorded the same
//! history; in a running or blocked one it says what would run live when the new build takes
//! it over.
//!
//! # What a check does not cover
//!
//! Code outside steps runs for real (as on every replay). Resources register as new and no
//! checkpoint is restored. Subagents replay as the steps that recorded their results.

mod history;
mod kernel;
mod report;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use rebuno::signing::sign_webhook;
use rebuno::{AgentBuilder, Secret};
use serde_json::json;

pub use history::History;
use kernel::ReplayKernel;
pub use report::{AskedStep, Danger, Ending, ReplayReport, Verdict};

/// Why a check could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The history's JSON is not a history.
    #[error("not a history: {0}")]
    History(#[source] serde_json::Error),
    /// The agent did not build.
    #[error("the agent did not build: {0}")]
    Agent(#[source] rebuno::Error),
    /// The agent refused the dispatch (its answer's status).
    #[error("the agent answered the dispatch with {0}")]
    Refused(http::StatusCode),
}

/// How long [`check`] waits for the run to end.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs the handler of `agent` (a builder, as for [`DevKernel::serve`](crate::DevKernel::serve))
/// against `history` and reports how it replays. Waits at most [`DEFAULT_TIMEOUT`];
/// [`check_within`] sets another bound. A run still going then (a handler waiting on something
/// a history cannot give, or retrying what it is refused) is reported as far as it got, with
/// [`Ending::TimedOut`], and stopped: every later kernel call it makes is answered
/// `409 lease_superseded`, as for a dispatch that was taken over.
pub async fn check(agent: AgentBuilder, history: &History) -> Result<ReplayReport, ReplayError> {
    check_within(agent, history, DEFAULT_TIMEOUT).await
}

/// [`check`] with a bound on the run.
pub async fn check_within(
    agent: AgentBuilder,
    history: &History,
    timeout: Duration,
) -> Result<ReplayReport, ReplayError> {
    let history = Arc::new(history.clone());
    let kernel = ReplayKernel::new(Arc::clone(&history));
    let secret = Secret::from(format!("replay-{}", uuid::Uuid::now_v7()));
    let agent = agent
        .secret(secret.clone())
        .base_url("http://replay.invalid")
        .transport(kernel.clone())
        .build()
        .map_err(ReplayError::Agent)?;
    let dispatch = signed_dispatch(&agent, &secret, &history.execution().id);
    let answer = agent.fetch(dispatch).await;
    if !answer.status().is_success() {
        return Err(ReplayError::Refused(answer.status()));
    }
    let finished = tokio::time::timeout(timeout, agent.join()).await.is_ok();
    if !finished {
        kernel.close();
    }
    agent.close_within(Duration::ZERO).await.ok();
    let mut report = report(&history, kernel);
    if !finished {
        report.ending = Ending::TimedOut(timeout);
    }
    let recorded_by = &history.execution().agent_id;
    if recorded_by != agent.id() {
        let note = format!(
            "the history was recorded by agent `{recorded_by}`, not `{}`",
            agent.id()
        );
        report.notes.insert(0, note);
    }
    Ok(report)
}

/// A webhook for attempt 1 of a fresh dispatch, signed with the agent's secret.
fn signed_dispatch(
    agent: &rebuno::Agent,
    secret: &Secret,
    execution_id: &str,
) -> http::Request<Full<Bytes>> {
    let body = json!({
        "execution_id": execution_id,
        "dispatch_id": uuid::Uuid::now_v7().to_string(),
        "dispatch_attempt": 1,
        "lease_timeout_seconds": 120,
    })
    .to_string();
    let signature = sign_webhook(secret, body.as_bytes());
    let mut request = http::Request::new(Full::new(Bytes::from(body)));
    *request.method_mut() = http::Method::POST;
    *request.uri_mut() = agent.webhook_path().parse().unwrap_or_default();
    let headers = request.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    if let Ok(value) = http::HeaderValue::from_str(&signature) {
        headers.insert("Rebuno-Signature", value);
    }
    if let Ok(value) = http::HeaderValue::from_str(execution_id) {
        headers.insert("Rebuno-Execution-Id", value);
    }
    request
}

/// The report: what the kernel saw, against what the history holds.
fn report(history: &History, kernel: ReplayKernel) -> ReplayReport {
    let seen = kernel.take_seen();
    let unreached = history
        .steps()
        .iter()
        .filter(|step| !seen.asked.iter().any(|a| a.step_id == step.step_id))
        .cloned()
        .collect();
    let execution = history.execution();
    let recorded_outcome = match execution.status {
        rebuno::wire::ExecutionStatus::Failed => Some(json!(execution.failure_reason)),
        _ => execution.output.clone(),
    };
    ReplayReport {
        execution_id: execution.id.clone(),
        asked: seen.asked,
        unreached,
        ending: seen.ending.unwrap_or(Ending::Stopped),
        recorded_status: execution.status,
        recorded_outcome,
        recorded_steps: history.steps().len(),
        notes: seen.notes,
    }
}
