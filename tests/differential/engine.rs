//! The comparison engine: each side's event logs and step records rendered as lines with
//! every run-specific value normalised, then compared line by line.
//!
//! Normalised: execution, dispatch and approval ids (named by first appearance: `<exec:1>`,
//! `<dispatch:1>`), step ids (recomputed from the step's identity with
//! `rebuno_devkernel::identity::step_id` and checked, then written as
//! `<kind target occurrence args_hash>`, which does not depend on the execution id; a step id
//! without a row, as a rate-limited call's, by first appearance), checkpoint
//! references and resource bindings (paths of the side's scratch directory), every `*_at`
//! timestamp, and event sequence numbers in payloads (as positions in the log without acks).
//!
//! `dispatch.acked` is appended when the webhook returns, which races the handler's first
//! calls (PROTOCOL.md §1.12): acks are left out of the event order and compared by
//! `(dispatch, attempt)` instead. Everything else (kinds, order, step identities, args,
//! results, errors, refusal strings, failure reasons, outputs) must be equal, except through a
//! scenario's explicit [`Justified`] rewrites.

use std::collections::HashMap;
use std::fmt::Write as _;

use rebuno_devkernel::identity;
use serde_json::Value;

use crate::world::Side;

/// A justified difference: a rewrite of the Python side's lines of one kind, from the Python
/// SDK's form to the Rust SDK's, with the reason it is by design. Each must apply at least once.
#[derive(Debug, Clone, Copy)]
pub struct Justified {
    pub why: &'static str,
    /// The line prefix it applies to (an event kind, `step`, `ack`).
    pub on: &'static str,
    /// The Python text and what the Rust SDK writes instead.
    pub python: &'static str,
    pub rust: &'static str,
}

/// Names run-specific values by first appearance.
#[derive(Default)]
struct Names {
    names: HashMap<String, String>,
    counts: HashMap<&'static str, usize>,
    steps: HashMap<String, String>,
    /// execution id → event seq → position without acks.
    seqs: HashMap<String, HashMap<u64, usize>>,
}

impl Names {
    fn name(&mut self, category: &'static str, raw: &str) -> String {
        if let Some(name) = self.names.get(raw) {
            return name.clone();
        }
        let count = self.counts.entry(category).or_default();
        *count += 1;
        let name = format!("<{category}:{count}>");
        self.names.insert(raw.to_owned(), name.clone());
        name
    }

    fn seq(&self, execution: &str, seq: u64) -> Value {
        match self.seqs.get(execution).and_then(|s| s.get(&seq)) {
            Some(position) => Value::String(format!("@{position}")),
            None => Value::String(format!("@?{seq}")),
        }
    }
}

/// Everything compared of one side: one line per event, ack and step.
pub async fn capture(side: &Side, ids: &[String]) -> Vec<String> {
    let mut names = Names::default();
    for id in ids {
        names.name("exec", id);
        learn(&mut names, side, id);
    }
    let mut lines = Vec::new();
    for id in ids {
        let exec = id.to_owned();
        lines.push(format!("== {} events", names.name("exec", &exec)));
        let events = side.kernel.events(id);
        let mut acks = Vec::new();
        for event in &events {
            let mut payload = event.payload.clone();
            let seq_exec = seq_owner(&event.payload, &exec);
            normalise(&mut names, &seq_exec, None, &mut payload);
            if event.kind == "dispatch.acked" {
                acks.push(format!("ack {}", canonical(&payload)));
            } else {
                lines.push(format!("{} {}", event.kind, canonical(&payload)));
            }
        }
        acks.sort();
        lines.extend(acks);
        lines.extend(step_lines(&mut names, side, id, &events).await);
    }
    lines.push("== marks".to_owned());
    lines.extend(side.mark_lines());
    lines
}

/// Learns the execution's step identities (checking each step id) and seq positions.
fn learn(names: &mut Names, side: &Side, id: &str) {
    let exec = id.to_owned();
    for step in side.kernel.steps(id) {
        let recomputed = identity::step_id(
            &exec,
            &step.kind,
            &step.target,
            &step.args_hash,
            step.occurrence,
        );
        assert_eq!(step.step_id, recomputed, "{:?}: step identity", side.lang);
        let name = format!(
            "<{} {} #{} {}>",
            step.kind,
            step.target,
            step.occurrence,
            &step.args_hash[..12]
        );
        names.steps.insert(step.step_id, name);
    }
    let mut positions = HashMap::new();
    let mut position = 0;
    for event in side.kernel.events(id) {
        if event.kind != "dispatch.acked" {
            position += 1;
        }
        positions.insert(event.event_seq, position);
    }
    names.seqs.insert(exec, positions);
}

/// The execution whose seqs an event's payload names: a fork marker's refer to its source.
fn seq_owner(payload: &Value, exec: &str) -> String {
    match payload["source_execution_id"].as_str() {
        Some(source) => source.to_owned(),
        None => exec.to_owned(),
    }
}

/// Step records as the kernel serves them (`GET /v0/executions/{id}/steps`, every field of
/// PROTOCOL.md's step object), in the order their `step.proposed` appear in the log.
async fn step_lines(
    names: &mut Names,
    side: &Side,
    id: &str,
    events: &[rebuno::wire::Event],
) -> Vec<String> {
    let url = format!("{}/v0/executions/{id}/steps", side.kernel.url());
    let response = reqwest::get(url).await.expect("steps");
    let steps: Vec<Value> =
        serde_json::from_str(&response.text().await.expect("steps body")).expect("steps JSON");
    let first_seen = |step: &Value| {
        events
            .iter()
            .position(|e| e.payload["step_id"] == step["step_id"])
            .unwrap_or(usize::MAX)
    };
    let mut ordered: Vec<_> = steps.iter().collect();
    ordered.sort_by_key(|s| (first_seen(s), s["occurrence"].as_u64()));
    let exec = id.to_owned();
    ordered
        .into_iter()
        .map(|step| {
            let mut record = serde_json::json!({
                "step_id": step["step_id"], "status": step["status"],
                "idempotency": step["idempotency"], "args": step["args"],
                "result": step["result"], "error": step["error"],
                "resources": step.get("resources").cloned().unwrap_or_else(|| Value::Array(Vec::new())),
                "usage": [step["usage_input"], step["usage_output"]],
            });
            normalise(names, &exec, None, &mut record);
            format!("step {}", canonical(&record))
        })
        .collect()
}

/// Rewrites run-specific values in place (see the module docs).
fn normalise(names: &mut Names, exec: &str, key: Option<&str>, value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                normalise(names, exec, Some(k.as_str()), v);
            }
        }
        Value::Array(items) => {
            for item in items {
                normalise(names, exec, key, item);
            }
        }
        Value::Number(n) if key.is_some_and(|k| k.ends_with("_seq")) => {
            if let Some(seq) = n.as_u64() {
                *value = names.seq(exec, seq);
            }
        }
        Value::String(text) => {
            if let Some(new) = rename(names, key, text) {
                *value = Value::String(new);
            }
        }
        _ => {}
    }
    if let (Some("binding"), false) = (key, value.is_null()) {
        *value = Value::String("<binding>".to_owned());
    }
}

fn rename(names: &mut Names, key: Option<&str>, text: &str) -> Option<String> {
    let key = key.unwrap_or_default();
    if key.ends_with("_at") {
        return Some("<time>".to_owned());
    }
    if key == "checkpoint_ref" {
        return Some(names.name("checkpoint", text));
    }
    if let Some(step) = names.steps.get(text) {
        return Some(step.clone());
    }
    if key == "step_id" {
        // A step refused before it got a row (`step.rate_limited`): its identity cannot be
        // recomputed without its args, so it is named by first appearance.
        return Some(names.name("unrecorded-step", text));
    }
    if uuid::Uuid::parse_str(text).is_ok() {
        let category = match key {
            "dispatch_id" => "dispatch",
            "approval_id" => "approval",
            k if k.ends_with("execution_id") || k == "id" => "exec",
            _ => "uuid",
        };
        return Some(names.name(category, text));
    }
    None
}

/// JSON with object keys sorted at every level (the two SDKs order their results' keys
/// differently, which JSON does not care about).
pub fn canonical(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical(&map[k])))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}

/// Applies the justified rewrites to the Python lines; panics if one never applies.
pub fn justify(python: &mut [String], justified: &[Justified]) {
    for rewrite in justified {
        let mut applied = 0;
        for line in python.iter_mut() {
            if line.starts_with(rewrite.on) && line.contains(rewrite.python) {
                *line = line.replace(rewrite.python, rewrite.rust);
                applied += 1;
            }
        }
        assert!(
            applied > 0,
            "justified difference never applied ({}): {:?} in {:?} lines",
            rewrite.why,
            rewrite.python,
            rewrite.on
        );
    }
}

/// Panics with both logs side by side, from a few lines before the first difference.
pub fn assert_same(scenario: &str, python: &[String], rust: &[String]) {
    let first = (0..python.len().max(rust.len())).find(|&i| python.get(i) != rust.get(i));
    let Some(first) = first else { return };
    let mut out = format!("scenario {scenario}: the logs differ at line {first}\n");
    for i in first.saturating_sub(3)..python.len().max(rust.len()) {
        let (p, r) = (python.get(i), rust.get(i));
        let mark = if p == r { ' ' } else { '!' };
        let none = String::from("<none>");
        let _ = writeln!(out, "{mark} {i:>3} python: {}", p.unwrap_or(&none));
        if p != r {
            let _ = writeln!(out, "{mark} {i:>3} rust:   {}", r.unwrap_or(&none));
        }
    }
    panic!("{out}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_owned).collect()
    }

    #[test]
    #[should_panic(expected = "the logs differ at line 1")]
    fn the_first_differing_line_is_reported() {
        assert_same("self-test", &lines("a\nb\nc"), &lines("a\nB\nc"));
    }

    #[test]
    #[should_panic(expected = "the logs differ at line 2")]
    fn a_missing_line_is_a_difference() {
        assert_same("self-test", &lines("a\nb\nc"), &lines("a\nb"));
    }

    #[test]
    #[should_panic(expected = "never applied")]
    fn a_stale_justified_rewrite_fails() {
        let rewrite = Justified {
            why: "self-test",
            on: "execution.failed",
            python: "RuntimeError: ",
            rust: "",
        };
        justify(&mut lines("execution.completed {}"), &[rewrite]);
    }

    #[test]
    fn ids_times_seqs_and_bindings_are_normalised() {
        let mut names = Names::default();
        let exec = "0192f1a0-0000-7000-8000-000000000000";
        names.seqs.insert(exec.to_owned(), HashMap::from([(7, 6)]));
        let mut payload = serde_json::json!({
            "execution_id": exec, "dispatch_id": "0192f1a0-0000-7000-8000-000000000001",
            "timeout_at": "2026-01-01T00:00:00Z", "covered_seq": 7, "binding": {"path": "/x"},
        });
        normalise(&mut names, exec, None, &mut payload);
        assert_eq!(
            canonical(&payload),
            r#"{"binding":"<binding>","covered_seq":"@6","dispatch_id":"<dispatch:1>","execution_id":"<exec:1>","timeout_at":"<time>"}"#
        );
    }
}
