//! Subagents: another agent's execution run as the result of the calling tool.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::client::Client;
use crate::context::{Exclusive, ExecutionContext, StepScope, current_step};
use crate::error::{Error, ErrorKind, Result};
use crate::wire::error_message;

/// Runs `agent_id` with `input` as a subagent of the calling tool and returns its output.
///
/// Call it inside a tool body. Other tool calls keep running while it waits; once every call in
/// flight waits, the execution suspends and releases its worker, and the handler reruns and
/// replays after the subagents settle. Use [`Subagent`] for a session or an explicit client.
///
/// ```no_run
/// use rebuno::{HandlerError, define_tool, subagent};
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Topic { topic: String }
///
/// let research = define_tool("research").execute(|args: Topic| async move {
///     Ok::<serde_json::Value, HandlerError>(subagent("researcher", &args).await?)
/// });
/// ```
///
/// # Errors
///
/// [`ErrorKind::Tool`] when the subagent failed or was cancelled; [`ErrorKind::Context`] outside
/// a tool body; [`ErrorKind::Blocked`] (control flow) when the execution suspends.
pub async fn subagent<R: DeserializeOwned>(agent_id: &str, input: impl Serialize) -> Result<R> {
    Subagent::new(agent_id, input).run().await
}

/// A subagent call with options. See [`subagent`].
#[derive(Debug)]
#[must_use = "a Subagent does nothing until `run` is called"]
pub struct Subagent {
    agent_id: String,
    input: std::result::Result<Value, String>,
    session: Option<String>,
    client: Option<Client>,
}

impl Subagent {
    /// A call of `agent_id` with `input`.
    pub fn new(agent_id: impl Into<String>, input: impl Serialize) -> Self {
        let input = serde_json::to_value(input).map_err(|e| e.to_string());
        Self {
            agent_id: agent_id.into(),
            input,
            session: None,
            client: None,
        }
    }

    /// Continues a conversation: subagents of one session run one at a time, each continuing
    /// from the last that completed. It must differ from the parent's session; derive it from
    /// the parent's id (`format!("researcher:{}", execution()?.id())`) so no other parent
    /// reuses it.
    pub fn session(mut self, session: impl Into<String>) -> Self {
        self.session = Some(session.into());
        self
    }

    /// The client that creates the subagent (it needs `executions:write`). Defaults to the
    /// agent's kernel with `REBUNO_API_KEY`.
    pub fn client(mut self, client: Client) -> Self {
        self.client = Some(client);
        self
    }

    /// Starts (or finds, on a rerun) the subagent and waits for its outcome.
    ///
    /// # Errors
    ///
    /// As [`subagent`].
    pub async fn run<R: DeserializeOwned>(self) -> Result<R> {
        let (context, step) = current_step().ok_or_else(|| {
            Error::new(ErrorKind::Context, "subagent() called outside a tool body")
        })?;
        let input = self.input.map_err(|e| {
            Error::new(ErrorKind::Serde, format!("subagent input is not JSON: {e}"))
        })?;
        let client = self
            .client
            .unwrap_or_else(|| Client::of_agent(context.kernel()));
        let mut create = client
            .create(&self.agent_id)
            .input(input)
            .spawned_by(context.id(), &step.id);
        if let Some(traceparent) = crate::spans::traceparent(context.id(), &step.id) {
            create = create.traceparent(traceparent);
        }
        if let Some(session) = self.session {
            create = create.session(session);
        }
        let child = create.send().await.map_err(|e| context.note(e))?;
        tracing::info!(
            child = child.id.as_str(),
            agent = self.agent_id.as_str(),
            "subagent started"
        );
        let output = settle(&context, &step).await?;
        serde_json::from_value(output)
            .map_err(|e| Error::serde("subagent output does not fit its type", e))
    }
}

/// Waits until every call waits; then either the execution suspended (the dispatch ends) or the
/// step already settled and its outcome is read. The effects lock is let go while waiting, so
/// concurrent calls can start their own subagents, and taken back before the step completes.
async fn settle(context: &ExecutionContext, step: &StepScope) -> Result<Value> {
    let held = lock(&step.exclusive).take().is_some();
    let idle = context.await_idle().await;
    if held {
        *lock(&step.exclusive) = Some(context.exclusive_always().await);
    }
    if idle? {
        return Err(context.note(Error::blocked()));
    }
    let step_id = step.id.as_str();
    let step = context.kernel().get_step(context.id(), step_id).await?;
    let step =
        step.ok_or_else(|| Error::new(ErrorKind::Protocol, "the subagent's step is gone"))?;
    match step.error {
        Some(error) => Err(Error::new(
            ErrorKind::Tool,
            format!("{}: {}", step.target, error_message(&error)),
        )
        .with_tool(&step.target, Some(step_id))),
        None => Ok(step.result.unwrap_or(Value::Null)),
    }
}

fn lock(
    slot: &std::sync::Mutex<Option<Exclusive>>,
) -> std::sync::MutexGuard<'_, Option<Exclusive>> {
    slot.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
