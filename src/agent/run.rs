//! The background run of one dispatch: fetch, decode, run under a heartbeat, complete or fail.

use futures_util::future::{Either, select};
use serde_json::Value;

use super::failure::{failure_reason, input_invalid};
use super::handler::ErasedHandler;
use crate::context::{DispatchEnd, ExecutionContext, Suspension};
use crate::error::{Error, ErrorKind, HandlerError, Result, error_chain};
use crate::kernel::{KernelClient, Lease};
use crate::panic::catch_panic;
use crate::refusal::raise_for_refusal;
use crate::rt::Deadline;

/// How a handler run ended.
enum Ending {
    Output(Value),
    Failure(String),
    Stop(Error),
}

/// Runs `handler` for one dispatch of `execution_id`. Never fails: every outcome is recorded on
/// the kernel or logged, and a lost dispatch is re-delivered by the kernel.
///
/// This future is held for as long as the handler waits, and a future is as large as its
/// largest state: the kernel round trips before and after the handler are boxed, and the
/// fetched execution lives in [`open`], not here.
pub(crate) async fn run_dispatch(
    agent_id: &str,
    kernel: KernelClient,
    handler: &dyn ErasedHandler,
    execution_id: &str,
    lease: Lease,
    deadline: Option<Deadline>,
) {
    let opened = Box::pin(open(agent_id, kernel, execution_id, lease, deadline)).await;
    let Some(context) = opened else {
        return;
    };
    let ending = match handler.start(context.input()) {
        Ok(run) => {
            // Deferred work (an LLM stream dropped early, still to be recorded) runs under the
            // heartbeat too: it may retry for a while, and a superseded run must not finish it.
            let run = std::pin::pin!(async {
                let outcome = catch_handler_panic(context.scope(run)).await;
                context.settle().await;
                outcome
            });
            let outcome = heartbeating(&context, run).await;
            ending(&context, outcome)
        }
        Err(detail) => Ending::Failure(input_invalid(&detail)),
    };
    Box::pin(record(&context, ending)).await;
}

/// Fetches the execution and makes the run's context; `None` (logged) when there is nothing
/// to run: the kernel could not be asked, or the execution already ended.
async fn open(
    agent_id: &str,
    kernel: KernelClient,
    execution_id: &str,
    lease: Lease,
    deadline: Option<Deadline>,
) -> Option<ExecutionContext> {
    let execution = match kernel.get_execution(execution_id).await {
        Ok(execution) => execution,
        Err(error) => {
            crate::spans::record_stop(error.kind());
            let why = "could not fetch the execution";
            log_stop(&kernel, agent_id, &lease, &error, why);
            return None;
        }
    };
    if execution.status.is_terminal() {
        crate::spans::record_stop(ErrorKind::Terminated);
        tracing::debug!(status = ?execution.status, "execution already terminal; nothing to do");
        return None;
    }
    tracing::info!(status = ?execution.status, "run started");
    Some(ExecutionContext::new(kernel, execution, lease, deadline))
}

/// Turns a panic in the handler (or a tool or step body it awaits) into a handler error, so the
/// execution fails at once with the panic's message instead of waiting out a lease per attempt.
///
/// On wasm32 panics abort the isolate, so this never runs there: the host answers the kernel's
/// next request with an error and the kernel re-delivers until its attempts run out.
async fn catch_handler_panic<F>(handler: F) -> Result<Value, HandlerError>
where
    F: std::future::Future<Output = Result<Value, HandlerError>>,
{
    catch_panic(handler).await.unwrap_or_else(|message| {
        tracing::error!(panic = message, "handler panicked");
        Err(HandlerError::from(format!("handler panicked: {message}")))
    })
}

/// Runs `handler` while renewing the lease; a superseded lease drops (cancels) the handler.
/// The handler comes pinned by the caller: pinning it here would move it into this future, which
/// then held it twice (as its argument and as the pinned local).
async fn heartbeating<F>(context: &ExecutionContext, handler: F) -> Result<Value, HandlerError>
where
    F: std::future::Future<Output = Result<Value, HandlerError>> + Unpin,
{
    let heartbeat = std::pin::pin!(heartbeat_loop(context));
    match select(handler, heartbeat).await {
        Either::Left((outcome, _)) => outcome,
        Either::Right((stopped, _)) => Err(stopped.into()),
    }
}

/// Renews the lease until the kernel refuses it; returns the control flow it saw.
async fn heartbeat_loop(context: &ExecutionContext) -> Error {
    let interval = context.lease().heartbeat_interval();
    loop {
        context.kernel().runtime().sleep(interval).await;
        // Boxed: the round trip would otherwise sit in the run's future between heartbeats.
        let renewed = Box::pin(context.kernel().heartbeat(context.id(), context.lease()));
        match renewed.await {
            Ok(()) => tracing::trace!("lease renewed"),
            Err(error) if error.is_control_flow() => return context.note(error),
            Err(error) => {
                tracing::warn!(error = error_chain(&error), "heartbeat failed; will retry")
            }
        }
    }
}

/// Classifies a finished handler run, letting remembered control flow win. A refusal carried
/// inside another error (a provider SDK's) counts as the error it stands for.
fn ending(context: &ExecutionContext, outcome: Result<Value, HandlerError>) -> Ending {
    if let Some(stop) = context.control_flow() {
        return Ending::Stop(stop);
    }
    let error = match outcome {
        Ok(output) => return Ending::Output(output),
        Err(error) => error,
    };
    if context.kernel_lost() {
        // A step submit cut mid-exchange has an unknown outcome and is not resent; the next
        // attempt submits it afresh, and the kernel settles what the first one left.
        tracing::warn!(
            error = error_chain(error.as_dyn()),
            "run failed after the kernel stopped answering; leaving it to the re-delivery"
        );
        return Ending::Stop(error.as_rebuno().map_or_else(
            || Error::new(ErrorKind::Network, "kernel unreachable"),
            Error::clone_shallow,
        ));
    }
    let refused = raise_for_refusal(error.as_dyn()).err();
    match refused {
        Some(stop) if stop.is_control_flow() => Ending::Stop(context.note(stop)),
        Some(refusal) => Ending::Failure(failure_reason(&HandlerError::from(refusal))),
        None => {
            // Logged with the reason, which carries this error, once the kernel has it.
            tracing::debug!(%error, "handler failed");
            Ending::Failure(failure_reason(&error))
        }
    }
}

/// Completes or fails the execution; control flow ends the dispatch quietly. Then tells each
/// resource's driver how the dispatch ended (once the kernel has the outcome).
async fn record(context: &ExecutionContext, ending: Ending) {
    let (written, end) = match ending {
        Ending::Output(output) => match complete(context, output).await {
            Some(written) => (written, DispatchEnd::Completed),
            None => return,
        },
        Ending::Failure(reason) => (fail(context, &reason).await, DispatchEnd::Failed),
        Ending::Stop(stop) => {
            if let Some(why) = Suspension::of(stop.kind()) {
                context.release_resources(DispatchEnd::Suspended(why)).await;
            }
            crate::spans::record_stop(stop.kind());
            return log_without_outcome(context, stop.kind());
        }
    };
    match written {
        Ok(()) => context.release_resources(end).await,
        Err(error) => {
            crate::spans::record_stop(error.kind());
            log_stop(
                context.kernel(),
                context.agent_id(),
                context.lease(),
                &error,
                "could not record the outcome",
            );
        }
    }
}

/// Checkpoints on completion, then completes the execution; `None` when control flow ended
/// the dispatch first.
async fn complete(context: &ExecutionContext, output: Value) -> Option<Result<()>> {
    if let Err(error) = context.checkpoint_on_completion().await {
        if error.is_control_flow() {
            crate::spans::record_stop(error.kind());
            tracing::debug!(kind = ?error.kind(), "dispatch ended by control flow");
            return None;
        }
        tracing::warn!(%error, "checkpoint on completion failed; the resources stay uncovered");
    }
    let state = context.state();
    let written = context
        .kernel()
        .complete_execution(context.id(), context.lease(), &output, state.as_ref())
        .await;
    if written.is_ok() {
        tracing::Span::current().record("outcome", "completed");
        tracing::info!("execution completed");
    }
    Some(written)
}

/// Fails the execution with `reason`.
async fn fail(context: &ExecutionContext, reason: &str) -> Result<()> {
    let written = context
        .kernel()
        .fail_execution(context.id(), context.lease(), reason)
        .await;
    if written.is_ok() {
        // Warn: the run ended, as it should, but someone may want to look at why.
        tracing::warn!(reason, "execution failed");
        let span = tracing::Span::current();
        span.record("outcome", "failed");
        span.record("failure_reason", reason);
    }
    written
}

/// Says why a dispatch ended without completing or failing its execution (control flow, or a
/// kernel that stopped answering), and what comes next: none of these is a failure.
fn log_without_outcome(context: &ExecutionContext, kind: ErrorKind) {
    let lease = context.lease().timeout.as_secs();
    match kind {
        ErrorKind::DeadlineReached if context.deadline_is_the_executions() => tracing::info!(
            deadline_at = context.deadline_at().unwrap_or_default(),
            "stopped before the execution's own deadline (deadline_at): no new step starts; the \
             kernel cancels the execution when the deadline passes"
        ),
        ErrorKind::DeadlineReached => tracing::info!(
            "yielded before the host's time limit, to resume on the next delivery: the kernel \
             re-delivers once this dispatch's lease runs out (lease_timeout_seconds: {lease}) and \
             the run replays its recorded steps"
        ),
        ErrorKind::Blocked => tracing::info!(
            "paused: the execution waits (an approval, its subagents, a rate limit); the kernel \
             re-delivers when it can go on"
        ),
        ErrorKind::LeaseSuperseded => {
            tracing::info!("stopped: a newer delivery of this execution took over")
        }
        ErrorKind::Terminated => tracing::info!(
            "stopped: the execution already ended elsewhere (completed, failed or cancelled)"
        ),
        ErrorKind::Network | ErrorKind::Timeout => tracing::info!(
            "ended without an outcome, the kernel having stopped answering: it re-delivers once \
             this dispatch's lease runs out (lease_timeout_seconds: {lease})"
        ),
        kind => tracing::info!(
            ?kind,
            "dispatch ended without an outcome; the kernel goes on from here"
        ),
    }
}

fn log_stop(kernel: &KernelClient, agent_id: &str, lease: &Lease, error: &Error, what: &str) {
    match error.kind() {
        ErrorKind::Terminated | ErrorKind::LeaseSuperseded => {
            tracing::debug!(%error, "{what}: dispatch no longer current")
        }
        _ => tracing::error!(
            error = error_chain(error),
            kernel = kernel.url(),
            "{what}{}; the kernel re-delivers once this dispatch's lease runs out \
             (lease_timeout_seconds: {})",
            hint(error.kind(), kernel, agent_id),
            lease.timeout.as_secs()
        ),
    }
}

/// What to check when the kernel refused or could not be reached, as `": ..."`.
fn hint(kind: ErrorKind, kernel: &KernelClient, agent_id: &str) -> String {
    match kind {
        ErrorKind::Unauthorized => format!(
            ": the kernel refused this agent's signed request (401): check that the agent id \
             `{agent_id}` is registered with the kernel and that REBUNO_AGENT_SECRET is its secret \
             there"
        ),
        ErrorKind::Network | ErrorKind::Timeout => format!(
            ": check that the kernel runs at {} (REBUNO_URL) and that this host can reach it",
            kernel.url()
        ),
        _ => String::new(),
    }
}
