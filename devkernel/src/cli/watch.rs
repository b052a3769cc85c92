//! Following an execution's event log live by polling `/events?after_seq=`.

use std::io::Write;
use std::time::Duration;

use serde_json::Value;

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

/// Prints every event of `id` as it is appended until a terminal event; `Ok(true)` when the
/// execution completed.
pub(crate) async fn follow(
    client: &Client,
    id: &str,
    out: &mut (dyn Write + Send),
) -> Result<bool, CliError> {
    let mut after = 0u64;
    loop {
        let page = client
            .get(&format!("/v0/executions/{id}/events?after_seq={after}"))
            .await?;
        let events = page.as_array().cloned().unwrap_or_default();
        for event in &events {
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
}
