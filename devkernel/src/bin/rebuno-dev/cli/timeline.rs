//! `rebuno-dev exec timeline ID`: an execution drawn on a time axis from its event log, one
//! row per dispatch attempt, step and wait.

use std::collections::HashMap;

use rebuno::wire::Event;
use serde_json::Value;

use crate::time::Timestamp;

/// The width of the time axis, in columns.
pub(crate) const AXIS: usize = 60;
/// The width of a row's label.
const LABEL: usize = 30;

/// What a row stands for, and how its bar is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dispatch,
    Step,
    Wait,
}

impl Kind {
    fn fill(self) -> char {
        match self {
            Self::Dispatch => '▓',
            Self::Step => '█',
            Self::Wait => '░',
        }
    }
}

/// One row: a span of time (a point when `start == end`) with a label and a note.
#[derive(Debug, Clone)]
struct Row {
    kind: Kind,
    label: String,
    start: i128,
    end: Option<i128>,
    note: String,
}

/// An event's time in nanoseconds since the epoch (`None` when unreadable).
fn nanos(event: &Event) -> Option<i128> {
    Timestamp::parse(&event.occurred_at).map(Timestamp::unix_nanos)
}

fn text<'a>(event: &'a Event, field: &str) -> &'a str {
    event
        .payload
        .get(field)
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Draws `events` (one execution's log, in order) on a time axis `axis` columns wide.
pub(crate) fn render(events: &[Event], axis: usize) -> String {
    let times: Vec<i128> = events.iter().filter_map(nanos).collect();
    let (Some(&first), Some(&last)) = (times.iter().min(), times.iter().max()) else {
        return "no events\n".to_owned();
    };
    let rows = rows(events, last);
    let span = (last - first).max(1_000_000); // at least a millisecond
    let mut out = header(events, span, rows.len());
    out.push_str(&format!(
        "{:LABEL$}0 s{:>width$}\n",
        "",
        seconds(span),
        width = axis - 3
    ));
    for row in &rows {
        out.push_str(&draw(row, first, span, axis));
    }
    out
}

/// `execution ID: completed in 2.41 s, 2 dispatches, 4 steps`.
fn header(events: &[Event], span: i128, rows: usize) -> String {
    let id = events.first().map_or("", |e| e.execution_id.as_str());
    let ended = events
        .iter()
        .rev()
        .find(|e| {
            matches!(
                e.kind.as_str(),
                "execution.completed" | "execution.failed" | "execution.cancelled"
            )
        })
        .map_or_else(
            || "still running".to_owned(),
            |e| e.kind.trim_start_matches("execution.").to_owned(),
        );
    format!(
        "execution {id}: {ended}, {} of events, {rows} rows\n",
        seconds(span)
    )
}

fn seconds(nanos: i128) -> String {
    #[allow(clippy::cast_precision_loss)] // display only
    let secs = nanos as f64 / 1e9;
    if secs < 10.0 {
        format!("{secs:.2} s")
    } else {
        format!("{secs:.0} s")
    }
}

/// One row as a line: label, bar on the axis, note.
fn draw(row: &Row, first: i128, span: i128, axis: usize) -> String {
    let column = |t: i128| -> usize {
        let scaled = (t - first).clamp(0, span) * (axis as i128 - 1) / span;
        usize::try_from(scaled).unwrap_or(0)
    };
    let from = column(row.start);
    let to = row.end.map_or(from, column).max(from);
    let mut bar: Vec<char> = vec![' '; axis];
    if row.end.is_none() {
        bar[from] = '◆';
    } else {
        bar[from..=to].fill(row.kind.fill());
    }
    let bar: String = bar.into_iter().collect();
    let label: String = row.label.chars().take(LABEL - 1).collect();
    format!("{label:LABEL$}{bar} {}\n", row.note)
}

/// The rows of a log, in the order they start.
fn rows(events: &[Event], last: i128) -> Vec<Row> {
    let mut rows = Vec::new();
    rows.extend(dispatch_rows(events, last));
    rows.extend(step_rows(events, last));
    rows.extend(wait_rows(events, last));
    rows.extend(point_rows(events));
    rows.sort_by_key(|r| (r.start, r.kind != Kind::Dispatch));
    rows
}

/// A row per delivery (numbered: a fresh dispatch after a block starts again at attempt 1),
/// from its acknowledgement to what ended it.
fn dispatch_rows(events: &[Event], last: i128) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    let mut open: Option<usize> = None;
    for event in events {
        let Some(at) = nanos(event) else { continue };
        let close = |rows: &mut Vec<Row>, open: &mut Option<usize>, note: &str| {
            if let Some(i) = open.take() {
                rows[i].end = Some(at);
                rows[i].note = note.to_owned();
            }
        };
        match event.kind.as_str() {
            "dispatch.acked" => {
                close(&mut rows, &mut open, "superseded");
                let attempt = event
                    .payload
                    .get("attempt")
                    .map_or_else(String::new, Value::to_string);
                open = Some(rows.len());
                rows.push(Row {
                    kind: Kind::Dispatch,
                    label: format!("dispatch {}, attempt {attempt}", rows.len() + 1),
                    start: at,
                    end: Some(last),
                    note: "running".to_owned(),
                });
            }
            "dispatch.reclaimed" => close(
                &mut rows,
                &mut open,
                &format!("reclaimed ({})", text(event, "error")),
            ),
            "execution.blocked" => close(&mut rows, &mut open, "blocked"),
            "execution.completed" | "execution.failed" | "execution.cancelled" => {
                close(
                    &mut rows,
                    &mut open,
                    event.kind.trim_start_matches("execution."),
                );
            }
            _ => {}
        }
    }
    rows
}

/// A row per step, from its first event to its last, with how it ended and how often it ran
/// (as far as the log tells: a rerun of an unsettled step appends a fresh `step.executing` only
/// when it touches resources).
fn step_rows(events: &[Event], last: i128) -> Vec<Row> {
    let mut order: Vec<&str> = Vec::new();
    let mut by_id: HashMap<&str, (Row, usize)> = HashMap::new();
    for event in events
        .iter()
        .filter(|e| e.kind.starts_with("step.") && e.kind != "step.rate_limited")
    {
        let (Some(at), id) = (nanos(event), text(event, "step_id")) else {
            continue;
        };
        let entry = by_id.entry(id).or_insert_with(|| {
            order.push(id);
            let label = format!("  {} {}", text(event, "step_type"), text(event, "target"));
            (
                Row {
                    kind: Kind::Step,
                    label,
                    start: at,
                    end: Some(at),
                    note: String::new(),
                },
                0,
            )
        });
        entry.0.end = Some(at);
        entry.0.note = event.kind.trim_start_matches("step.").to_owned();
        entry.1 += usize::from(event.kind == "step.executing");
    }
    order
        .into_iter()
        .filter_map(|id| by_id.remove(id))
        .map(|(mut row, runs)| {
            if runs > 1 {
                row.note = format!("{}, ran {runs} times", row.note);
            }
            if matches!(row.note.as_str(), "executing" | "awaiting_approval") {
                row.end = Some(last);
            }
            row
        })
        .collect()
}

/// A row per approval (requested to decided) and per blocked stretch.
fn wait_rows(events: &[Event], last: i128) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    let mut approvals: HashMap<&str, usize> = HashMap::new();
    let mut blocked: Option<usize> = None;
    for event in events {
        let Some(at) = nanos(event) else { continue };
        match event.kind.as_str() {
            "approval.requested" => {
                approvals.insert(text(event, "approval_id"), rows.len());
                rows.push(Row {
                    kind: Kind::Wait,
                    label: "  approval".to_owned(),
                    start: at,
                    end: Some(last),
                    note: "pending".to_owned(),
                });
            }
            "approval.granted" | "approval.denied" | "approval.expired" => {
                if let Some(&i) = approvals.get(text(event, "approval_id")) {
                    rows[i].end = Some(at);
                    rows[i].note = event.kind.trim_start_matches("approval.").to_owned();
                }
            }
            "execution.blocked" => {
                blocked = Some(rows.len());
                rows.push(Row {
                    kind: Kind::Wait,
                    label: "blocked".to_owned(),
                    start: at,
                    end: Some(last),
                    note: "waiting".to_owned(),
                });
            }
            "execution.resumed"
            | "execution.completed"
            | "execution.failed"
            | "execution.cancelled" => {
                if let Some(i) = blocked.take() {
                    rows[i].end = Some(at);
                    rows[i].note = "resumed".to_owned();
                }
            }
            _ => {}
        }
    }
    rows
}

/// Moments without a duration: rate limits and failed deliveries.
fn point_rows(events: &[Event]) -> Vec<Row> {
    events
        .iter()
        .filter_map(|event| {
            let at = nanos(event)?;
            let (label, note) = match event.kind.as_str() {
                "step.rate_limited" => (
                    format!("  rate limited {}", text(event, "target")),
                    "parked or refused".to_owned(),
                ),
                "dispatch.failed" => {
                    let status = event
                        .payload
                        .get("http_status")
                        .map_or_else(|| text(event, "error").to_owned(), Value::to_string);
                    ("delivery failed".to_owned(), status)
                }
                _ => return None,
            };
            Some(Row {
                kind: Kind::Wait,
                label,
                start: at,
                end: None,
                note,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(seq: u64, kind: &str, millis: u64, payload: Value) -> Event {
        let at = format!(
            "2026-12-02T10:00:{:02}.{:03}Z",
            millis / 1000,
            millis % 1000
        );
        serde_json::from_value(json!({
            "execution_id": "e1", "event_seq": seq, "type": kind, "payload": payload, "occurred_at": at
        }))
        .unwrap()
    }

    fn log() -> Vec<Event> {
        let step = |id: &str, target: &str| json!({"step_id": id, "step_type": "tool_call", "target": target});
        vec![
            event(1, "execution.created", 0, json!({})),
            event(2, "dispatch.queued", 0, json!({"attempt": 0})),
            event(3, "dispatch.acked", 100, json!({"attempt": 1})),
            event(4, "step.proposed", 200, step("s1", "search")),
            event(5, "step.executing", 210, step("s1", "search")),
            event(6, "step.succeeded", 900, step("s1", "search")),
            event(7, "step.proposed", 1000, step("s2", "send")),
            event(8, "step.executing", 1010, step("s2", "send")),
            event(
                9,
                "dispatch.reclaimed",
                3000,
                json!({"error": "lease_expired"}),
            ),
            event(10, "dispatch.acked", 3100, json!({"attempt": 2})),
            event(11, "step.executing", 3200, step("s2", "send")),
            event(12, "step.succeeded", 3500, step("s2", "send")),
            event(13, "execution.completed", 4000, json!({})),
        ]
    }

    #[test]
    fn a_crash_and_a_redelivery_read_off_the_axis() {
        let drawn = render(&log(), 40);
        let lines: Vec<&str> = drawn.lines().collect();
        assert_eq!(
            lines[0],
            "execution e1: completed, 4.00 s of events, 4 rows"
        );
        assert!(lines[1].ends_with("4.00 s"), "{drawn}");
        let row = |label: &str| {
            *lines
                .iter()
                .find(|l| l.trim_start().starts_with(label))
                .unwrap()
        };
        assert!(
            row("dispatch 1, attempt 1").ends_with("reclaimed (lease_expired)"),
            "{drawn}"
        );
        assert!(
            row("dispatch 2, attempt 2").ends_with("completed"),
            "{drawn}"
        );
        assert!(row("tool_call search").ends_with("succeeded"), "{drawn}");
        assert!(
            row("tool_call send").ends_with("succeeded, ran 2 times"),
            "{drawn}"
        );
        // The first attempt's bar ends where the second begins: at 3.0 of 4.0 s.
        let bar = |label: &str| row(label).chars().skip(LABEL).take(40).collect::<String>();
        assert_eq!(bar("dispatch 1, attempt 1").trim_end().chars().count(), 30);
        assert_eq!(
            bar("dispatch 2, attempt 2").chars().position(|c| c == '▓'),
            Some(30)
        );
    }

    #[test]
    fn approvals_blocks_and_points_have_rows() {
        let log = vec![
            event(1, "execution.created", 0, json!({})),
            event(2, "dispatch.acked", 0, json!({"attempt": 1})),
            event(3, "approval.requested", 500, json!({"approval_id": "a1"})),
            event(4, "execution.blocked", 500, json!({})),
            event(5, "approval.expired", 2000, json!({"approval_id": "a1"})),
            event(6, "execution.resumed", 2000, json!({})),
            event(7, "dispatch.failed", 2100, json!({"http_status": 401})),
            event(8, "step.rate_limited", 2500, json!({"target": "fetch"})),
        ];
        let drawn = render(&log, 30);
        assert!(drawn.starts_with("execution e1: still running"), "{drawn}");
        assert!(
            drawn.contains("approval") && drawn.contains("expired"),
            "{drawn}"
        );
        assert!(
            drawn
                .lines()
                .any(|l| l.starts_with("blocked") && l.ends_with("resumed")),
            "{drawn}"
        );
        assert!(
            drawn
                .lines()
                .any(|l| l.starts_with("delivery failed") && l.contains('◆') && l.ends_with("401")),
            "{drawn}"
        );
        assert!(drawn.contains("rate limited fetch"), "{drawn}");
        assert_eq!(render(&[], 30), "no events\n");
    }
}
