//! A kernel played from a history: the agent's requests answered from what was recorded, and
//! every step the history cannot answer stopped before its body runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use rebuno::transport::{Transport, TransportFuture};
use rebuno::wire::StepRecord;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::History;
use super::report::{AskedStep, Ending, Verdict};
use crate::identity::{args_hash, step_id};

/// A step submit as the SDK sends it; `args` kept as its raw text, which is what is hashed.
#[derive(Deserialize)]
struct Submission<'a> {
    kind: String,
    #[serde(default)]
    target: String,
    #[serde(default, borrow)]
    args: Option<&'a RawValue>,
    #[serde(default)]
    idempotency: String,
}

/// What the handler did, for the report.
#[derive(Debug, Default)]
pub(super) struct Seen {
    pub(super) asked: Vec<AskedStep>,
    pub(super) ending: Option<Ending>,
    pub(super) notes: Vec<String>,
}

#[derive(Debug)]
struct State {
    history: Arc<History>,
    /// Recorded steps by id, as indexes into `history.steps()`.
    by_id: HashMap<String, usize>,
    /// Occurrences so far of each (kind, target, args hash), as the kernel counts them.
    counters: HashMap<StepKey, u32>,
    seen: Seen,
    /// Steps the check stopped the run at, by (kind, target, args hash), with how often the
    /// handler asked for them again (swallowing the stop).
    stopped: HashMap<StepKey, usize>,
    /// The check is over: every request is refused as from a superseded dispatch.
    closed: bool,
}

/// A step's identity without its occurrence: (kind, target, args hash).
type StepKey = (String, String, String);

/// The replaying kernel; clones share one state.
#[derive(Debug, Clone)]
pub(super) struct ReplayKernel(Arc<Mutex<State>>);

impl ReplayKernel {
    pub(super) fn new(history: Arc<History>) -> Self {
        let by_id = history
            .steps()
            .iter()
            .enumerate()
            .map(|(i, step)| (step.step_id.clone(), i))
            .collect();
        Self(Arc::new(Mutex::new(State {
            history,
            by_id,
            counters: HashMap::new(),
            seen: Seen::default(),
            stopped: HashMap::new(),
            closed: false,
        })))
    }

    /// Ends the check: the handler's later requests are refused, so it stops.
    pub(super) fn close(&self) {
        self.lock().closed = true;
    }

    /// What the handler did so far.
    pub(super) fn take_seen(&self) -> Seen {
        let mut state = self.lock();
        let repeated: Vec<String> = state
            .stopped
            .iter()
            .filter(|(_, repeats)| **repeats > 0)
            .map(|((kind, target, _), repeats)| {
                format!(
                    "after the check stopped it at {kind} `{target}`, the handler asked for it {repeats} more time(s): it swallows control flow (on a kernel the first ask would have gone on)"
                )
            })
            .collect();
        state.seen.notes.extend(repeated);
        std::mem::take(&mut state.seen)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Transport for ReplayKernel {
    fn send(&self, request: http::Request<Bytes>, _: Duration) -> TransportFuture {
        let response = self.lock().answer(&request);
        Box::pin(std::future::ready(Ok(response)))
    }
}

/// A response with a JSON body.
fn json_response(status: StatusCode, body: &Value) -> http::Response<Bytes> {
    let mut response = http::Response::new(Bytes::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

fn no_content() -> http::Response<Bytes> {
    let mut response = http::Response::new(Bytes::new());
    *response.status_mut() = StatusCode::NO_CONTENT;
    response
}

fn error(status: StatusCode, code: &str, message: &str) -> http::Response<Bytes> {
    json_response(status, &json!({ "code": code, "message": message }))
}

impl State {
    /// Routes one request of the agent API.
    fn answer(&mut self, request: &http::Request<Bytes>) -> http::Response<Bytes> {
        if self.closed {
            return error(
                StatusCode::CONFLICT,
                "lease_superseded",
                "the replay check is over",
            );
        }
        let path = request.uri().path().to_owned();
        let body = request.body();
        let Some(rest) = path.strip_prefix("/v0/executions/") else {
            return self.outside(request.method(), &path);
        };
        let (id, route) = rest.split_once('/').unwrap_or((rest, ""));
        if id != self.history.execution().id {
            self.note(format!("a request for another execution: {path}"));
            return error(StatusCode::NOT_FOUND, "not_found", "not in this history");
        }
        match (request.method(), route) {
            (&Method::GET, "") => self.execution(),
            (&Method::GET, "previous") => self.previous(),
            (&Method::POST, "steps") => self.submit(body),
            (&Method::POST, "heartbeat") => no_content(),
            (&Method::POST, "complete") => self.complete(body),
            (&Method::POST, "fail") => self.fail(body),
            (&Method::POST, "suspend") => {
                self.note("the handler suspended (waiting for subagents)".to_owned());
                json_response(StatusCode::OK, &json!({ "suspended": true }))
            }
            (&Method::POST, "resources") => self.register_resource(body),
            (&Method::POST, route) if route.starts_with("resources/") => no_content(),
            (method, route) => {
                self.note(format!("an unexpected request: {method} …/{route}"));
                error(
                    StatusCode::CONFLICT,
                    "conflict",
                    "not answerable from a history",
                )
            }
        }
    }

    /// Requests outside the execution: agent metadata is accepted, the rest noted.
    fn outside(&mut self, method: &Method, path: &str) -> http::Response<Bytes> {
        if method == Method::PUT && path.starts_with("/v0/agents/") {
            return no_content();
        }
        self.note(format!("an unexpected request: {method} {path}"));
        error(
            StatusCode::NOT_FOUND,
            "not_found",
            "not answerable from a history",
        )
    }

    fn note(&mut self, note: String) {
        if !self.seen.notes.contains(&note) {
            self.seen.notes.push(note);
        }
    }

    /// The execution as it was, but running, so the handler runs whatever its recorded end.
    fn execution(&self) -> http::Response<Bytes> {
        let mut execution = serde_json::to_value(self.history.execution()).unwrap_or_default();
        if let Some(object) = execution.as_object_mut() {
            object.insert("status".to_owned(), json!("running"));
            object.remove("output");
            object.remove("failure_reason");
        }
        json_response(StatusCode::OK, &execution)
    }

    /// The session's previous state as recorded; a history without one answers as a kernel
    /// does for an execution without a parent.
    fn previous(&self) -> http::Response<Bytes> {
        let none = json!({ "state": null });
        json_response(StatusCode::OK, self.history.previous().unwrap_or(&none))
    }

    fn complete(&mut self, body: &[u8]) -> http::Response<Bytes> {
        let output = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|b| b.get("output").cloned())
            .unwrap_or(Value::Null);
        self.seen.ending = Some(Ending::Completed(output));
        no_content()
    }

    fn fail(&mut self, body: &[u8]) -> http::Response<Bytes> {
        let reason = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|b| b.get("error").cloned())
            .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_owned))
            .unwrap_or_default();
        self.seen.ending = Some(Ending::Failed(reason));
        no_content()
    }

    /// A resource registers as new: its contents are not restored by a replay check.
    fn register_resource(&mut self, body: &[u8]) -> http::Response<Bytes> {
        self.note("resources register as new: a replay check restores no checkpoint".to_owned());
        let mut view = serde_json::from_slice::<Value>(body).unwrap_or_else(|_| json!({}));
        if let Some(object) = view.as_object_mut() {
            for (field, zero) in [("generation", json!(0)), ("count", json!(0))] {
                object.insert(field.to_owned(), zero);
            }
            object.insert("covered".to_owned(), json!(false));
        }
        json_response(StatusCode::OK, &view)
    }

    /// A step submit: the recorded decision when the history has the step, else a stop.
    fn submit(&mut self, body: &[u8]) -> http::Response<Bytes> {
        let Ok(submission) = serde_json::from_slice::<Submission<'_>>(body) else {
            return error(StatusCode::BAD_REQUEST, "validation_error", "invalid step");
        };
        let raw_args = submission.args.map_or("", RawValue::get);
        let Ok(hash) = args_hash(raw_args.as_bytes()) else {
            return error(StatusCode::BAD_REQUEST, "validation_error", "invalid args");
        };
        let key = (submission.kind.clone(), submission.target.clone(), hash);
        let id = self.next_id(&key);
        // Asked again for a step the check stopped, with no recorded occurrence to match: the
        // handler swallowed the stop and retries (a twin in the history is answered as such).
        if !self.by_id.contains_key(&id)
            && let Some(repeats) = self.stopped.get_mut(&key)
        {
            *repeats += 1;
            return json_response(StatusCode::OK, &json!({ "decision": "execution_blocked" }));
        }
        self.counters
            .entry(key.clone())
            .and_modify(|n| *n += 1)
            .or_insert(1);
        let recorded = self.by_id.get(&id).map(|&i| &self.history.steps()[i]);
        let (verdict, mut answer) = decide(recorded, &submission.idempotency, &self.history);
        if verdict.is_recorded() {
            if let Some(object) = answer.as_object_mut() {
                object.insert("step_id".to_owned(), json!(id));
            }
        } else {
            self.stopped.insert(key, 0);
        }
        self.seen.asked.push(AskedStep {
            position: self.seen.asked.len() + 1,
            step_id: id,
            kind: submission.kind,
            target: submission.target,
            args: serde_json::from_str(raw_args).unwrap_or(Value::Null),
            idempotency: idempotency_or_default(submission.idempotency),
            verdict,
        });
        json_response(StatusCode::OK, &answer)
    }

    /// The id the kernel would give the next submit of `key`. It counts every submit it
    /// handles or records, unsettled reruns and new steps included, so identical calls in
    /// flight together get occurrences 0, 1, ...
    fn next_id(&self, key: &StepKey) -> String {
        let occurrence = self.counters.get(key).copied().unwrap_or(0);
        step_id(
            &self.history.execution().id,
            &key.0,
            &key.1,
            &key.2,
            occurrence,
        )
    }
}

fn idempotency_or_default(idempotency: String) -> String {
    if idempotency.is_empty() {
        "safe_to_retry".to_owned()
    } else {
        idempotency
    }
}

/// What the kernel would decide for a submit that maps to `recorded` (or to nothing), and the
/// answer that replays it or stops the handler before a body would run.
fn decide(recorded: Option<&StepRecord>, idempotency: &str, history: &History) -> (Verdict, Value) {
    let stop = json!({ "decision": "execution_blocked" });
    let Some(step) = recorded else {
        return (Verdict::New, stop);
    };
    match step.status.as_str() {
        "succeeded" => (
            Verdict::Replayed,
            json!({ "decision": "replay", "result": step.result.clone().unwrap_or(Value::Null) }),
        ),
        "failed" => (
            Verdict::Replayed,
            json!({ "decision": "replay", "error": step.error.clone().unwrap_or(Value::Null) }),
        ),
        "denied" => (Verdict::Denied, denial(step)),
        "awaiting_approval" => (
            Verdict::AwaitingApproval,
            json!({ "decision": "blocked", "approval_id": history.approval_of(&step.step_id) }),
        ),
        "executing" if idempotency == "at_most_once" => (
            Verdict::Indeterminate,
            json!({ "decision": "replay", "error": {
                "reason": "indeterminate",
                "message": "outcome unknown: this may already have taken effect. Check the state before continuing."
            }}),
        ),
        // Started but never settled (executing, allowed, proposed) or cancelled: the kernel
        // would let it run again.
        _ => (Verdict::Rerun, stop),
    }
}

/// A recorded denial as the kernel replays it: its reason (default `policy_denied`) and rule.
fn denial(step: &StepRecord) -> Value {
    let field = |name: &str| {
        step.error
            .as_ref()
            .and_then(|e| e.get(name))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    json!({
        "decision": "denied",
        "reason": field("reason").unwrap_or_else(|| "policy_denied".to_owned()),
        "rule_id": field("rule_id").unwrap_or_default(),
    })
}
