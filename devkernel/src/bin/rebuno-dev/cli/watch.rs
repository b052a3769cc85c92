//! Following an execution's event log live by polling `/events?after_seq=`, with the live step
//! deltas of `/stream` (a streamed LLM answer) in between.

use std::io::Write;
use std::str::FromStr;
use std::time::Duration;

use futures_util::StreamExt;
use rebuno::client::{DeltaStream, StepDelta};
use rebuno::wire::Event;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio::task::JoinHandle;

use super::CliError;
use super::client::Remote;
use rebuno_devkernel::EventKind;

/// Pause between polls.
const POLL: Duration = Duration::from_millis(200);

/// The event types that end an execution, with whether it succeeded.
fn terminal(kind: &str) -> Option<bool> {
    let kind = EventKind::from_str(kind).ok()?;
    kind.is_terminal()
        .then_some(kind == EventKind::ExecutionCompleted)
}

/// One event as a terminal line: `seq type payload`.
pub(crate) fn event_line(event: &Event) -> String {
    format!(
        "{:>4}  {:<26} {}",
        event.event_seq, event.kind, event.payload
    )
}

/// One live delta as a terminal line: `~ step-prefix #seq text` (text on one line, cut).
pub(crate) fn delta_line(delta: &StepDelta) -> String {
    let text = &delta.data;
    let flat: String = text.escape_debug().take(DELTA_WIDTH).collect();
    let cut = if text.escape_debug().count() > DELTA_WIDTH {
        "…"
    } else {
        ""
    };
    let step: String = delta.step_id.chars().take(12).collect();
    format!("   ~  delta {step} #{:<3} {flat}{cut}", delta.seq)
}

/// How much of a delta's text one line shows.
const DELTA_WIDTH: usize = 100;

/// Prints every event of `id` as it is appended until a terminal event, and live deltas as
/// they arrive; `Ok(true)` when the execution completed.
pub(crate) async fn follow(
    remote: &Remote,
    id: &str,
    out: &mut (dyn Write + Send),
) -> Result<bool, CliError> {
    // Subscribed before the first poll, so no delta of the run is missed.
    let stream = remote.call(remote.client().stream(id)).await?;
    let (mut deltas, forward) = forward_deltas(stream);
    let followed = poll_events(remote, id, out, &mut deltas).await;
    forward.abort();
    followed
}

/// Moves the deltas of `stream` to a channel as they arrive, until it ends or fails.
fn forward_deltas(mut stream: DeltaStream) -> (UnboundedReceiver<StepDelta>, JoinHandle<()>) {
    let (sender, deltas) = unbounded_channel();
    let forward = tokio::spawn(async move {
        while let Some(next) = stream.next().await {
            match next {
                Ok(delta) => {
                    if sender.send(delta).is_err() {
                        return;
                    }
                }
                Err(error) => {
                    // Deltas are best-effort; the event log goes on.
                    tracing::warn!(%error, "live deltas stopped");
                    return;
                }
            }
        }
    });
    (deltas, forward)
}

/// Prints the deltas received so far.
fn print_deltas(
    deltas: &mut UnboundedReceiver<StepDelta>,
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    while let Ok(delta) = deltas.try_recv() {
        writeln!(out, "{}", delta_line(&delta))?;
    }
    Ok(())
}

/// Polls the log after the last event printed, pausing while nothing is new, until a
/// terminal event; `Ok(true)` when it is `execution.completed`.
async fn poll_events(
    remote: &Remote,
    id: &str,
    out: &mut (dyn Write + Send),
    deltas: &mut UnboundedReceiver<StepDelta>,
) -> Result<bool, CliError> {
    let mut after = 0u64;
    loop {
        print_deltas(deltas, out)?;
        let events = remote.call(remote.client().events(id, after, None)).await?;
        if let Some(completed) = print_events(&events, deltas, out)? {
            return Ok(completed);
        }
        after = events.last().map_or(after, |event| event.event_seq);
        if events.is_empty() {
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Prints `events` in order, each after the deltas received before it, and flushes; stops at
/// a terminal event with whether the execution completed.
fn print_events(
    events: &[Event],
    deltas: &mut UnboundedReceiver<StepDelta>,
    out: &mut (dyn Write + Send),
) -> Result<Option<bool>, CliError> {
    for event in events {
        print_deltas(deltas, out)?;
        writeln!(out, "{}", event_line(event))?;
        if let Some(completed) = terminal(&event.kind) {
            out.flush()?;
            return Ok(Some(completed));
        }
    }
    out.flush()?;
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_terminal_events() {
        let event = serde_json::json!({"execution_id": "e", "event_seq": 3, "type": "dispatch.queued", "payload": {"attempt": 0}});
        let event: Event = serde_json::from_value(event).unwrap();
        assert_eq!(
            event_line(&event),
            "   3  dispatch.queued            {\"attempt\":0}"
        );
        assert_eq!(terminal("execution.completed"), Some(true));
        assert_eq!(terminal("execution.cancelled"), Some(false));
        assert_eq!(terminal("step.failed"), None);
    }

    #[test]
    fn deltas_are_one_short_line() {
        let data = r#"{"step_id":"0123456789abcdef","seq":2,"data":"data: {\"x\":1}\n\n"}"#;
        let delta: StepDelta = serde_json::from_str(data).unwrap();
        assert_eq!(
            delta_line(&delta),
            r#"   ~  delta 0123456789ab #2   data: {\"x\":1}\n\n"#
        );
    }
}
