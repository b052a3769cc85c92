//! Following an execution's event log live by polling `/events?after_seq=`, with the live step
//! deltas of `/stream` (a streamed LLM answer) in between.

use std::io::Write;
use std::time::Duration;

use futures_util::StreamExt;
use rebuno::client::StepDelta;
use serde_json::Value;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::CliError;
use super::client::Client;

/// Pause between polls.
const POLL: Duration = Duration::from_millis(200);

/// The event types that end an execution, with whether it succeeded.
fn terminal(kind: &str) -> Option<bool> {
    match kind {
        "execution.completed" => Some(true),
        "execution.failed" | "execution.cancelled" => Some(false),
        _ => None,
    }
}

/// One event as a terminal line: `seq type payload`.
pub(crate) fn event_line(event: &Value) -> String {
    let seq = event.get("event_seq").and_then(Value::as_u64).unwrap_or(0);
    let kind = event.get("type").and_then(Value::as_str).unwrap_or("?");
    let payload = event.get("payload").cloned().unwrap_or(Value::Null);
    format!("{seq:>4}  {kind:<26} {payload}")
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
    client: &Client,
    id: &str,
    out: &mut (dyn Write + Send),
) -> Result<bool, CliError> {
    // Subscribed before the first poll, so no delta of the run is missed.
    let mut stream = client.sdk()?.stream(id).await?;
    let (sender, mut deltas) = unbounded_channel();
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
    let followed = poll_events(client, id, out, &mut deltas).await;
    forward.abort();
    followed
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

async fn poll_events(
    client: &Client,
    id: &str,
    out: &mut (dyn Write + Send),
    deltas: &mut UnboundedReceiver<StepDelta>,
) -> Result<bool, CliError> {
    let mut after = 0u64;
    loop {
        print_deltas(deltas, out)?;
        let page = client
            .get(&format!("/v0/executions/{id}/events?after_seq={after}"))
            .await?;
        let events = page.as_array().cloned().unwrap_or_default();
        for event in &events {
            print_deltas(deltas, out)?;
            writeln!(out, "{}", event_line(event))?;
            after = event
                .get("event_seq")
                .and_then(Value::as_u64)
                .unwrap_or(after);
            if let Some(ok) = event.get("type").and_then(Value::as_str).and_then(terminal) {
                out.flush()?;
                return Ok(ok);
            }
        }
        out.flush()?;
        if events.is_empty() {
            tokio::time::sleep(POLL).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_terminal_events() {
        let event = serde_json::json!({"event_seq": 3, "type": "dispatch.queued", "payload": {"attempt": 0}});
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
