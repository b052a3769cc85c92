//! `kernel_responses`: the SDK against a kernel that answers every request with a random
//! status and a garbage, truncated, wrongly typed, huge or valid-looking body.
//!
//! A case delivers one to three signed webhooks to an agent whose handler runs a random plan
//! (tools, local steps, `call_json`, subagents, concurrent calls, resources, LLM calls,
//! `previous`, state), drives every background run to its end, then runs random
//! [`rebuno::client::Client`] operator calls. After `cutoff` requests the kernel answers
//! `execution_terminal` for good, so every case ends. Every request the SDK sends is checked:
//! agent routes carry a valid `v1=` request signature and lease headers on mutations, client
//! routes the configured bearer token, and every body is JSON.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::future::join_all;
use http::{Method, StatusCode};
use rebuno::client::Client;
use rebuno::llm::DurableLlm;
use rebuno::resource::{Checkpoints, ResourceDriver};
use rebuno::rt::Deadline;
use rebuno::signing::RequestSignature;
use rebuno::transport::{
    ByteStream, StreamingFuture, Transport, TransportError, TransportErrorKind, TransportFuture,
};
use rebuno::{Agent, BoxError, HandlerError, Idempotency, Secret, Step, Subagent};
use serde_json::{Value, json};

use crate::Recorder;
use crate::exec::{EPOCH_MILLIS, drive, runtime};
use crate::mutate;
use crate::rng::Rng;

/// Polls after which a case counts as hung.
const MAX_POLLS: u64 = 2_000_000;
/// Requests a case may send after the kernel said terminal for good.
const OVERSHOOT: u32 = 150;

/// The statuses the protocol uses.
const STATUSES: &[u16] = &[
    200, 201, 202, 204, 400, 401, 403, 404, 409, 410, 422, 429, 500, 502, 503,
];

const CODES: &[&str] = &[
    "execution_terminal",
    "lease_superseded",
    "unauthorized",
    "policy_denied",
    "not_found",
    "conflict",
    "validation_error",
    "rate_limited",
    "internal_error",
    "forbidden",
    "",
    "💥",
];

const SPLICE: &[&[u8]] = &[
    br#"{"decision":"proceed","step_id":"aa","resources":[{"key":"ws","generation":1,"due":true}]}"#,
    br#"{"id":"e","agent_id":"a","status":"running","input":{"n":1}}"#,
    br#"{"code":"execution_terminal","message":"x"}"#,
    br#"[{"execution_id":"e","event_seq":1,"type":"t","payload":{}}]"#,
    br#"{"suspended":true}"#,
];

/// What a request is, by method and path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    GetExecution,
    Previous,
    SubmitStep,
    SettleStep,
    StreamDelta,
    GetStep,
    Heartbeat,
    Finish,
    Suspend,
    RegisterResource,
    BindResource,
    Checkpoints,
    Metadata,
    Create,
    List,
    Events,
    Cancel,
    Fork,
    ForkPoints,
    Steps,
    Approvals,
    Approval,
    Decide,
    Stream,
    Unknown,
}

fn classify(method: &Method, path: &str) -> Route {
    let Some(rest) = path.split('?').next().and_then(|p| p.split_once("/v0/")) else {
        return Route::Unknown;
    };
    let segments: Vec<&str> = rest.1.split('/').collect();
    let get = method == Method::GET;
    let post = method == Method::POST;
    match segments.as_slice() {
        ["executions"] if post => Route::Create,
        ["executions"] if get => Route::List,
        ["executions", _] if get => Route::GetExecution,
        ["executions", _, "previous"] if get => Route::Previous,
        ["executions", _, "steps"] if post => Route::SubmitStep,
        ["executions", _, "steps"] if get => Route::Steps,
        ["executions", _, "steps", _] if get => Route::GetStep,
        ["executions", _, "steps", _, "complete" | "fail"] if post => Route::SettleStep,
        ["executions", _, "steps", _, "stream"] if post => Route::StreamDelta,
        ["executions", _, "heartbeat"] if post => Route::Heartbeat,
        ["executions", _, "complete" | "fail"] if post => Route::Finish,
        ["executions", _, "suspend"] if post => Route::Suspend,
        ["executions", _, "cancel"] if post => Route::Cancel,
        ["executions", _, "fork"] if post => Route::Fork,
        ["executions", _, "events"] if get => Route::Events,
        ["executions", _, "fork-points"] if get => Route::ForkPoints,
        ["executions", _, "stream"] if get => Route::Stream,
        ["executions", _, "resources"] if post => Route::RegisterResource,
        ["executions", _, "resources", "checkpoints"] if post => Route::Checkpoints,
        ["executions", _, "resources", _, "binding"] if post => Route::BindResource,
        ["agents", _, "metadata"] if method == Method::PUT => Route::Metadata,
        ["approvals"] if get => Route::Approvals,
        ["approvals", _] if get => Route::Approval,
        ["approvals", _, "grant" | "deny"] if post => Route::Decide,
        _ => Route::Unknown,
    }
}

impl Route {
    fn is_agent(self) -> bool {
        matches!(
            self,
            Self::GetExecution
                | Self::Previous
                | Self::SubmitStep
                | Self::SettleStep
                | Self::StreamDelta
                | Self::GetStep
                | Self::Heartbeat
                | Self::Finish
                | Self::Suspend
                | Self::RegisterResource
                | Self::BindResource
                | Self::Checkpoints
                | Self::Metadata
        )
    }
}

/// The fake kernel's state, shared by the agent's and the client's transports.
struct State {
    rng: Rng,
    requests: u32,
    cutoff: u32,
    secret: Secret,
    agent_id: String,
    token: Option<String>,
    origin: String,
    prefix: String,
    execution_id: String,
    next_step: u64,
    /// Per mille of answers that are a valid sample with a success status (the rest is chaos).
    sane: usize,
    log: Vec<(String, Vec<u8>)>,
}

/// The fake kernel as one side sees it: the agent's transport or the client's.
#[derive(Clone)]
struct Kernel {
    state: Arc<Mutex<State>>,
    agent: bool,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FuzzKernel")
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Transport for Kernel {
    fn send(&self, request: http::Request<Bytes>, _: Duration) -> TransportFuture {
        let answer = self.answer(&request);
        Box::pin(async move { answer })
    }
}

impl Kernel {
    /// Checks `request` and answers it: past the cutoff a terminal answer, else mostly a sane
    /// sample (as often as `sane` says), sometimes a transport error, else a random response.
    /// Every exchange is logged.
    fn answer(
        &self,
        request: &http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, TransportError> {
        let mut state = lock(&self.state);
        let route = check_request(&state, request, self.agent);
        state.requests += 1;
        let n = state.requests;
        let result = if n > state.cutoff {
            Ok(cut_off(&mut state, n))
        } else if state.rng.below(1000) < state.sane {
            Ok(sane_response(&mut state, route, request))
        } else if state.rng.one_in(25) {
            Err(transport_error(&mut state.rng))
        } else {
            Ok(random_response(&mut state, route, request))
        };
        log_exchange(&mut state, n, route, request, &result);
        result
    }
}

/// The answer to request `n` past the cutoff: `409 execution_terminal` (or, one time in four,
/// `lease_superseded`). The SDK must stop calling within [`OVERSHOOT`] such answers.
fn cut_off(state: &mut State, n: u32) -> http::Response<Bytes> {
    assert!(
        n <= state.cutoff + OVERSHOOT,
        "the SDK kept calling ({n} requests) after {OVERSHOOT} terminal answers"
    );
    let code = if state.rng.one_in(4) {
        "lease_superseded"
    } else {
        "execution_terminal"
    };
    response(
        StatusCode::CONFLICT,
        json!({"code": code, "message": "cut off"})
            .to_string()
            .into_bytes(),
    )
}

/// A valid sample answer for `route`, rendered, with a success status.
fn sane_response(
    state: &mut State,
    route: Route,
    request: &http::Request<Bytes>,
) -> http::Response<Bytes> {
    let sample = sample(state, route, request);
    let status = *state.rng.pick(&[200, 200, 200, 201, 202, 204]);
    let body = match sample {
        Sample::Json(value) => mutate::render(&mut state.rng, &value),
        Sample::Text(text) => text,
    };
    response(StatusCode::from_u16(status).unwrap_or(StatusCode::OK), body)
}

/// A refused connection, a timeout or another transport failure.
fn transport_error(rng: &mut Rng) -> TransportError {
    let kind = *rng.pick(&[
        TransportErrorKind::Connect,
        TransportErrorKind::Timeout,
        TransportErrorKind::Other,
    ]);
    TransportError::new(kind, "fuzz transport error")
}

/// Keeps request `n` and its answer in the log (the last 64, for a failure report) and traces
/// it under `FUZZ_TRACE`.
fn log_exchange(
    state: &mut State,
    n: u32,
    route: Route,
    request: &http::Request<Bytes>,
    result: &Result<http::Response<Bytes>, TransportError>,
) {
    let line = format!(
        "#{n} {} {} -> {}",
        request.method(),
        request.uri(),
        match result {
            Ok(r) => r.status().as_str().to_owned(),
            Err(e) => format!("{:?}", e.kind()),
        }
    );
    let body = result
        .as_ref()
        .map(|r| r.body().to_vec())
        .unwrap_or_default();
    if trace() {
        eprintln!(
            "TRACE {route:?} {}",
            line.split(" -> ").nth(1).unwrap_or("")
        );
    }
    state.log.push((line, body));
    if state.log.len() > 64 {
        state.log.remove(0);
    }
}

/// `FUZZ_TRACE=1` prints every route and answer to stderr (to see what a run reaches).
pub(crate) fn trace() -> bool {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("FUZZ_TRACE").is_some())
}

fn response(status: StatusCode, body: Vec<u8>) -> http::Response<Bytes> {
    let mut response = http::Response::new(Bytes::from(body));
    *response.status_mut() = status;
    response
}

/// Checks what the SDK sent; returns the route.
fn check_request(state: &State, request: &http::Request<Bytes>, agent: bool) -> Route {
    let uri = request.uri();
    let target = uri.path_and_query().map_or("", |pq| pq.as_str());
    let absolute = uri.to_string();
    assert!(
        absolute.starts_with(&format!("{}{}/v0/", state.origin, state.prefix)),
        "request outside the kernel: {absolute}"
    );
    let route = classify(request.method(), target);
    assert_ne!(
        route,
        Route::Unknown,
        "unknown route {} {target}",
        request.method()
    );
    let body = request.body();
    assert!(
        body.is_empty() || rebuno_devkernel::identity::canonical_json(body).is_ok(),
        "request body is not JSON: {}",
        mutate::escape(body, 200)
    );
    if agent {
        check_agent_request(state, request, route, target);
    } else {
        let expected = state.token.as_ref().map(|t| format!("Bearer {t}"));
        assert_eq!(
            request.headers().get("authorization").map(|v| v.as_bytes()),
            expected.as_ref().map(String::as_bytes),
            "authorization header"
        );
    }
    route
}

/// An agent request (to `route`, at `target`): an agent route, the agent id header, a numeric
/// timestamp, lease headers exactly on leased routes, and a valid request signature.
fn check_agent_request(state: &State, request: &http::Request<Bytes>, route: Route, target: &str) {
    let header = |name: &str| request.headers().get(name).map(|v| v.as_bytes());
    assert!(
        route.is_agent(),
        "the agent sent a client request: {route:?}"
    );
    assert_eq!(
        header("rebuno-agent-id"),
        Some(state.agent_id.as_bytes()),
        "agent id header"
    );
    let text = |name: &str| {
        header(name).map(|v| match std::str::from_utf8(v) {
            Ok(text) => text.to_owned(),
            Err(_) => panic!("header {name} is not UTF-8"),
        })
    };
    let timestamp = text("rebuno-timestamp").unwrap_or_default();
    assert!(
        !timestamp.is_empty() && timestamp.bytes().all(|b| b.is_ascii_digit()),
        "timestamp {timestamp:?}"
    );
    let dispatch_id = text("rebuno-dispatch-id").unwrap_or_default();
    let attempt = text("rebuno-dispatch-attempt").unwrap_or_default();
    let leased = !matches!(
        route,
        Route::GetExecution | Route::Previous | Route::GetStep | Route::Metadata
    );
    assert_eq!(
        !dispatch_id.is_empty() && !attempt.is_empty(),
        leased,
        "lease headers on {route:?}"
    );
    let signature = RequestSignature {
        method: request.method().as_str(),
        target,
        timestamp: &timestamp,
        dispatch_id: &dispatch_id,
        attempt: &attempt,
    };
    assert!(
        signature
            .verify(&state.secret, request.body(), header("rebuno-signature"))
            .is_ok(),
        "bad request signature on {} {target}",
        request.method()
    );
}

fn random_response(
    state: &mut State,
    route: Route,
    request: &http::Request<Bytes>,
) -> http::Response<Bytes> {
    let sample = sample(state, route, request);
    let rng = &mut state.rng;
    if rng.one_in(8) {
        let status =
            StatusCode::from_u16(*rng.pick(&STATUSES[4..])).unwrap_or(StatusCode::CONFLICT);
        let envelope = match rng.below(4) {
            0 => {
                let random = mutate::value(rng, 2);
                mutate::render(rng, &random)
            }
            _ => json!({"code": rng.pick(CODES), "message": mutate::string(rng)})
                .to_string()
                .into_bytes(),
        };
        return response(status, envelope);
    }
    let (body, exact) = match sample {
        Sample::Json(value) => mutate::json_variant(rng, &value, SPLICE),
        Sample::Text(text) => {
            if rng.coin() {
                (text, true)
            } else {
                let mut text = text;
                mutate::mutate_bytes(rng, &mut text, SPLICE);
                (text, false)
            }
        }
    };
    let status = if exact && !rng.one_in(4) {
        *rng.pick(&[200, 200, 200, 201, 202, 204])
    } else {
        *rng.pick(STATUSES)
    };
    response(StatusCode::from_u16(status).unwrap_or(StatusCode::OK), body)
}

enum Sample {
    Json(Value),
    Text(Vec<u8>),
}

fn hex64(n: u64) -> String {
    format!("{n:064x}")
}

fn execution_json(rng: &mut Rng, id: &str, agent_id: &str) -> Value {
    let status = *rng.pick(&[
        "running",
        "running",
        "running",
        "running",
        "pending",
        "blocked",
        "completed",
        "failed",
        "cancelled",
        "teleported",
    ]);
    let input = match rng.below(4) {
        0 => mutate::value(rng, 3),
        _ => json!({"n": rng.below(5), "text": "hi"}),
    };
    let mut execution = json!({
        "id": id,
        "agent_id": agent_id,
        "status": status,
        "input": input,
        "created_at": "2024-01-01T00:00:00Z",
        "updated_at": "2024-01-01T00:00:01Z",
    });
    if rng.one_in(3) {
        execution["session"] = json!(mutate::ident(rng));
    }
    if rng.one_in(3) {
        execution["output"] = mutate::value(rng, 2);
    }
    if rng.one_in(4) {
        execution["spawned_by"] = json!({"execution_id": "p", "step_id": hex64(1)});
    }
    execution
}

fn step_json(rng: &mut Rng, step_id: &str, execution_id: &str) -> Value {
    let mut step = json!({
        "step_id": step_id,
        "execution_id": execution_id,
        "kind": rng.pick(&["tool_call", "local", "llm_call"]),
        "target": "t",
        "status": rng.pick(&["succeeded", "failed", "executing", "cancelled"]),
    });
    if rng.coin() {
        step["result"] = mutate::value(rng, 3);
    } else if rng.coin() {
        step["error"] = json!({"message": mutate::string(rng), "failure_reason": "agent_error: x"});
    }
    step
}

/// A valid-looking answer for `route` (the execution and step ids the case uses, random
/// fields), before any mutation.
fn sample(state: &mut State, route: Route, request: &http::Request<Bytes>) -> Sample {
    let execution_id = state.execution_id.clone();
    let agent_id = state.agent_id.clone();
    state.next_step += 1;
    let step_id = hex64(state.next_step);
    let rng = &mut state.rng;
    let path = request.uri().path();
    let path_step = path
        .split('/')
        .skip_while(|s| *s != "steps")
        .nth(1)
        .unwrap_or("")
        .to_owned();
    let value = match route {
        Route::GetExecution | Route::Create | Route::Fork => {
            let id = if route == Route::GetExecution {
                execution_id
            } else {
                format!("child-{}", rng.below(100))
            };
            execution_json(rng, &id, &agent_id)
        }
        Route::Previous => json!({"state": mutate::value(rng, 3)}),
        Route::SubmitStep => submit_step_answer(rng, &step_id),
        Route::SettleStep => match rng.below(6) {
            0 => json!({"decision": "execution_terminal"}),
            1 => json!({"decision": "replay", "step_id": path_step, "result": 1}),
            _ => json!({"decision": "recorded", "step_id": path_step}),
        },
        Route::GetStep => step_json(rng, &path_step, &execution_id),
        Route::Steps => steps_json(rng, &execution_id),
        Route::Heartbeat
        | Route::Finish
        | Route::StreamDelta
        | Route::BindResource
        | Route::Checkpoints
        | Route::Metadata
        | Route::Cancel
        | Route::Decide => {
            if rng.coin() {
                return Sample::Text(Vec::new());
            }
            json!({})
        }
        Route::Suspend => json!({"suspended": rng.coin()}),
        Route::RegisterResource => resource_view(rng, request.body()),
        Route::List => execution_page(rng, &agent_id),
        Route::Events => events_json(rng, request, &execution_id),
        Route::ForkPoints => json!({
            "latest_seq": rng.below(100),
            "resources": {"ws": 1},
            "checkpoints": [{"key": "ws", "generation": 1, "checkpoint_ref": "r", "covered_seq": 2}],
        }),
        Route::Approvals | Route::Approval => approvals_json(rng, route, &execution_id),
        Route::Stream => return Sample::Text(stream_text(rng, &step_id)),
        Route::Unknown => json!({}),
    };
    Sample::Json(value)
}

/// The kernel's decision on a submitted step (mostly `proceed` or `replay`), with the step id
/// (usually), a replayed result or error, resources due, or a policy refusal's details.
fn submit_step_answer(rng: &mut Rng, step_id: &str) -> Value {
    let decision = *rng.pick(&[
        "proceed",
        "proceed",
        "proceed",
        "proceed",
        "replay",
        "replay",
        "denied",
        "blocked",
        "rate_limited",
        "execution_blocked",
        "execution_terminal",
        "recorded",
        "teleport",
    ]);
    let mut answer = json!({"decision": decision});
    if !rng.one_in(10) {
        answer["step_id"] = json!(step_id);
    }
    match decision {
        "replay" if rng.coin() => {
            answer["error"] = match rng.below(3) {
                0 => json!({"message": "recorded failure"}),
                1 => json!({"reason": "indeterminate"}),
                _ => mutate::value(rng, 2),
            };
        }
        "replay" => answer["result"] = mutate::value(rng, 3),
        "proceed" if rng.coin() => {
            let key = *rng.pick(&["ws", "db", "unknown"]);
            answer["resources"] =
                json!([{"key": key, "generation": rng.below(5), "due": rng.coin()}]);
        }
        "denied" | "rate_limited" | "blocked" => {
            if rng.coin() {
                answer["reason"] = json!(mutate::string(rng));
            }
            answer["rule_id"] = json!("r1");
            answer["approval_id"] = json!("ap1");
        }
        _ => {}
    }
    if rng.one_in(6) {
        answer["resources"] = Value::Null;
    }
    answer
}

/// A list of up to 3 steps of `execution_id`, or (sometimes) `null`.
fn steps_json(rng: &mut Rng, execution_id: &str) -> Value {
    if rng.one_in(4) {
        Value::Null
    } else {
        let n = rng.below(4);
        Value::Array(
            (0..n)
                .map(|i| step_json(rng, &hex64(i as u64), execution_id))
                .collect(),
        )
    }
}

/// The view of a registered resource, for the key the request `body` names (`ws` by default),
/// with random state, sometimes a binding and a checkpoint reference.
fn resource_view(rng: &mut Rng, body: &[u8]) -> Value {
    let key = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("key").cloned())
        .unwrap_or(json!("ws"));
    let mut view = json!({
        "key": key,
        "driver_id": "fuzz.driver.v1",
        "configuration": null,
        "coverage_reuse": rng.coin(),
        "every_steps": rng.below(3),
        "on_completion": rng.coin(),
        "generation": rng.below(4),
        "count": rng.below(4),
        "covered": rng.coin(),
    });
    if rng.coin() {
        view["binding"] = if rng.coin() {
            json!(7)
        } else {
            mutate::value(rng, 2)
        };
    }
    if rng.coin() {
        view["checkpoint_ref"] = json!(format!("ref-{}", rng.below(3)));
    }
    view
}

/// A page of up to 2 executions of `agent_id`, sometimes with a next cursor.
fn execution_page(rng: &mut Rng, agent_id: &str) -> Value {
    let n = rng.below(3);
    let executions: Vec<Value> = (0..n)
        .map(|i| execution_json(rng, &format!("e{i}"), agent_id))
        .collect();
    let mut page = json!({"executions": executions});
    if rng.coin() {
        page["next_cursor"] = json!("c1");
    }
    page
}

/// Up to 3 events of `execution_id` numbered after the request's `after_seq`, or (sometimes)
/// `null`.
fn events_json(rng: &mut Rng, request: &http::Request<Bytes>, execution_id: &str) -> Value {
    if rng.one_in(4) {
        Value::Null
    } else {
        let after = request
            .uri()
            .query()
            .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("after_seq=")))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        let n = rng.below(4);
        Value::Array(
            (0..n)
                .map(|i| {
                    json!({
                        "execution_id": execution_id,
                        "event_seq": after + 1 + i as u64,
                        "type": "step.succeeded",
                        "payload": {},
                        "occurred_at": "2024-01-01T00:00:00Z",
                    })
                })
                .collect(),
        )
    }
}

/// One approval on `execution_id` in a random state: as is for [`Route::Approval`], else in a
/// list (or, sometimes, `null`).
fn approvals_json(rng: &mut Rng, route: Route, execution_id: &str) -> Value {
    let approval = json!({
        "id": "ap1",
        "step_id": hex64(3),
        "execution_id": execution_id,
        "status": rng.pick(&["pending", "granted", "denied", "expired"]),
        "approvers": if rng.coin() { json!(null) } else { json!(["ada"]) },
        "timeout_at": "2024-01-01T00:05:00Z",
        "created_at": "2024-01-01T00:00:00Z",
    });
    if route == Route::Approval {
        approval
    } else if rng.one_in(4) {
        Value::Null
    } else {
        json!([approval])
    }
}

/// An event stream of up to 3 deltas of step `step_id`, with random data.
fn stream_text(rng: &mut Rng, step_id: &str) -> Vec<u8> {
    let mut text = Vec::new();
    for seq in 0..rng.below(4) {
        text.extend_from_slice(
            format!(
                "data: {}\n\n",
                json!({"step_id": step_id, "seq": seq, "data": mutate::string(rng)})
            )
            .as_bytes(),
        );
    }
    text
}

/// A provider for LLM calls: random statuses, JSON or event-stream answers, chunked.
#[derive(Clone)]
struct Provider(Arc<Mutex<Rng>>);

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FuzzProvider")
    }
}

/// A provider answer: the head, the body chunks, whether the body breaks.
type ProviderAnswer = (http::Response<()>, Vec<Vec<u8>>, bool);

impl Provider {
    fn head_and_chunks(&self) -> Result<ProviderAnswer, TransportError> {
        let mut rng = lock(&self.0);
        if rng.one_in(20) {
            return Err(TransportError::new(
                TransportErrorKind::Other,
                "provider down",
            ));
        }
        let status = *rng.pick(&[200, 200, 200, 400, 429, 500]);
        let streamed = rng.coin();
        let body = if streamed {
            let mut text = Vec::new();
            for i in 0..rng.below(6) {
                let piece =
                    json!({"choices": [{"delta": {"content": mutate::string(&mut rng)}}], "i": i});
                text.extend_from_slice(format!("data: {piece}\n\n").as_bytes());
            }
            text.extend_from_slice(b"data: [DONE]\n\n");
            if rng.one_in(4) {
                mutate::mutate_bytes(&mut rng, &mut text, &[]);
            }
            text
        } else {
            let sample = json!({"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}});
            mutate::json_variant(&mut rng, &sample, &[]).0
        };
        let chunks = mutate::chunks(&mut rng, &body);
        let broken = rng.one_in(15);
        let mut head = http::Response::new(());
        *head.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
        let content_type = if streamed {
            "text/event-stream"
        } else {
            "application/json"
        };
        head.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(content_type),
        );
        Ok((head, chunks, broken))
    }
}

impl Transport for Provider {
    fn send(&self, _: http::Request<Bytes>, _: Duration) -> TransportFuture {
        let answer = self
            .head_and_chunks()
            .map(|(head, chunks, _)| head.map(|()| Bytes::from(chunks.concat())));
        Box::pin(async move { answer })
    }

    fn send_streaming(&self, _: http::Request<Bytes>, _: Duration) -> StreamingFuture {
        let answer = self.head_and_chunks().map(|(head, chunks, broken)| {
            let mut items: Vec<Result<Bytes, BoxError>> =
                chunks.into_iter().map(|c| Ok(Bytes::from(c))).collect();
            if broken {
                let at = items.len() / 2;
                items.insert(at, Err("provider stream broke".into()));
            }
            head.map(|()| Box::pin(futures_util::stream::iter(items)) as ByteStream)
        });
        Box::pin(async move { answer })
    }
}

/// A resource driver whose operations succeed or fail as the case decided.
#[derive(Clone)]
struct Driver {
    fail_create: bool,
    fail_open: bool,
    fail_checkpoint: bool,
    counter: Arc<AtomicU64>,
}

impl ResourceDriver for Driver {
    type Handle = Arc<AtomicU64>;
    type Binding = u64;

    fn driver_id(&self) -> String {
        "fuzz.driver.v1".to_owned()
    }

    async fn create(&self, checkpoint: Option<&str>) -> Result<(Self::Handle, u64), BoxError> {
        if self.fail_create {
            return Err("create failed".into());
        }
        if checkpoint == Some("ref-2") {
            return Err(Box::new(rebuno::resource::CheckpointUnavailable(
                "ref-2".to_owned(),
            )));
        }
        Ok((Arc::clone(&self.counter), 7))
    }

    async fn open(&self, _binding: u64) -> Result<Self::Handle, BoxError> {
        if self.fail_open {
            return Err("open failed".into());
        }
        Ok(Arc::clone(&self.counter))
    }

    async fn checkpoint(&self, handle: &Self::Handle) -> Result<String, BoxError> {
        if self.fail_checkpoint {
            return Err("checkpoint failed".into());
        }
        Ok(format!("ref-{}", handle.load(Ordering::Relaxed)))
    }
}

/// One step of a handler plan.
#[derive(Debug, Clone)]
enum Op {
    Tool {
        ok: bool,
        at_most_once: bool,
        resources: bool,
        yields: u32,
        args: Value,
        result: Value,
    },
    ToolJson(Value),
    Local {
        name: String,
        args: Option<Value>,
        ok: bool,
        result: Value,
    },
    Subagent(usize),
    Previous,
    SetState(Value),
    Resource {
        key: &'static str,
        every: u32,
        fail: (bool, bool, bool),
    },
    Llm {
        json_body: bool,
        stream: bool,
        read: bool,
    },
    Execution,
}

#[derive(Debug, Clone)]
struct Plan {
    ops: Vec<(Op, bool)>,
    output: Value,
    fail: bool,
}

fn plan(rng: &mut Rng) -> Plan {
    let n = rng.below(10);
    let ops = (0..n)
        .map(|_| {
            let op = match rng.below(12) {
                0..=2 => Op::Tool {
                    ok: !rng.one_in(4),
                    at_most_once: rng.one_in(3),
                    resources: rng.one_in(3),
                    yields: if rng.coin() { 0 } else { rng.below(40) as u32 },
                    args: if rng.one_in(4) {
                        mutate::value(rng, 3)
                    } else {
                        json!({"q": "x"})
                    },
                    result: mutate::value(rng, 2),
                },
                3 => Op::ToolJson(if rng.coin() {
                    json!({"q": 1})
                } else {
                    mutate::value(rng, 2)
                }),
                4 | 5 => Op::Local {
                    name: mutate::ident(rng),
                    args: rng.coin().then(|| mutate::value(rng, 2)),
                    ok: !rng.one_in(4),
                    result: mutate::value(rng, 2),
                },
                6 => Op::Subagent(rng.range(1, 3)),
                7 => Op::Previous,
                8 => Op::SetState(mutate::value(rng, 2)),
                9 => Op::Resource {
                    key: if rng.coin() { "ws" } else { "db" },
                    every: rng.below(3) as u32,
                    fail: (rng.one_in(8), rng.one_in(8), rng.one_in(6)),
                },
                10 => Op::Llm {
                    json_body: !rng.one_in(6),
                    stream: rng.coin(),
                    read: !rng.one_in(4),
                },
                _ => Op::Execution,
            };
            (op, rng.coin())
        })
        .collect();
    let output = if rng.one_in(50) {
        let levels = rng.range(1, mutate::MAX_DEPTH);
        mutate::nest(rng, json!(1), levels)
    } else {
        mutate::value(rng, 3)
    };
    Plan {
        ops,
        output,
        fail: rng.one_in(8),
    }
}

/// Everything the handler needs, cheap to clone.
#[derive(Clone)]
struct Deps {
    client: Client,
    provider: Provider,
}

async fn run_plan(plan: Arc<Plan>, deps: Deps) -> Result<Value, HandlerError> {
    for (op, propagate) in &plan.ops {
        let outcome = run_op(op, &deps).await;
        if *propagate {
            outcome?;
        }
    }
    if plan.fail {
        return Err("the plan fails".into());
    }
    Ok(plan.output.clone())
}

/// Yields `n` times, so concurrent work (the heartbeat) gets to run.
async fn yield_times(n: u32) {
    for _ in 0..n {
        let mut yielded = false;
        std::future::poll_fn(|cx| {
            if std::mem::replace(&mut yielded, true) {
                std::task::Poll::Ready(())
            } else {
                cx.waker().wake_by_ref();
                std::task::Poll::Pending
            }
        })
        .await;
    }
}

fn tool(
    name: &str,
    ok: bool,
    result: Value,
    at_most_once: bool,
    resources: bool,
    yields: u32,
) -> rebuno::Tool<Value, Value> {
    let builder = rebuno::define_tool(name).description("fuzz tool");
    let builder = if at_most_once {
        builder.idempotency(Idempotency::AtMostOnce)
    } else {
        builder
    };
    let builder = if resources {
        builder.resources(["ws"])
    } else {
        builder
    };
    builder.execute(move |_args: Value| {
        let result = result.clone();
        async move {
            yield_times(yields).await;
            if ok {
                Ok(result)
            } else {
                Err(HandlerError::from("tool body failed"))
            }
        }
    })
}

/// Runs one step of the plan.
async fn run_op(op: &Op, deps: &Deps) -> Result<Value, HandlerError> {
    match op {
        Op::Tool {
            ok,
            at_most_once,
            resources,
            yields,
            args,
            result,
        } => Ok(tool(
            "search",
            *ok,
            result.clone(),
            *at_most_once,
            *resources,
            *yields,
        )
        .call(args.clone())
        .await?),
        Op::ToolJson(args) => Ok(tool("json", true, json!("r"), false, false, 0)
            .call_json(args.clone())
            .await?),
        Op::Local {
            name,
            args,
            ok,
            result,
        } => run_local(name, args.as_ref(), *ok, result).await,
        Op::Subagent(n) => run_subagents(*n, deps).await,
        Op::Previous => Ok(rebuno::previous().await?),
        Op::SetState(state) => {
            rebuno::execution()?.set_state(state.clone())?;
            Ok(Value::Null)
        }
        Op::Resource { key, every, fail } => use_resource(key, *every, *fail).await,
        Op::Llm {
            json_body,
            stream,
            read,
        } => call_llm(*json_body, *stream, *read, deps).await,
        Op::Execution => {
            let context = rebuno::execution()?;
            Ok(json!([
                context.id(),
                context.dispatch_attempt(),
                context.session()
            ]))
        }
    }
}

/// A local step called `name` (with `args` when given) whose body returns `result` or fails.
async fn run_local(
    name: &str,
    args: Option<&Value>,
    ok: bool,
    result: &Value,
) -> Result<Value, HandlerError> {
    let mut step = Step::new(name.to_owned());
    if let Some(args) = args {
        step = step.args(args.clone());
    }
    let result = result.clone();
    Ok(step
        .run(|| async move {
            if ok {
                Ok(result)
            } else {
                Err(HandlerError::from("step body failed"))
            }
        })
        .await?)
}

/// `n` concurrent tool calls, each running a child execution through [`Subagent`]; fails with
/// the first that failed.
async fn run_subagents(n: usize, deps: &Deps) -> Result<Value, HandlerError> {
    let calls = (0..n).map(|i| {
        let client = deps.client.clone();
        let research = rebuno::define_tool(format!("research{i}")).execute(move |args: Value| {
            let client = client.clone();
            async move {
                Subagent::new("child", args)
                    .client(client)
                    .run::<Value>()
                    .await
            }
        });
        async move { research.call(json!({"topic": i})).await }
    });
    let results = join_all(calls).await;
    let mut values = Vec::new();
    for result in results {
        values.push(result?);
    }
    Ok(Value::Array(values))
}

/// Opens the resource `key` with a [`Driver`] failing as `fail` says (create, open,
/// checkpoint), checkpointed every `every` steps (never for 0), and bumps its counter.
async fn use_resource(
    key: &str,
    every: u32,
    fail: (bool, bool, bool),
) -> Result<Value, HandlerError> {
    let driver = Driver {
        fail_create: fail.0,
        fail_open: fail.1,
        fail_checkpoint: fail.2,
        counter: Arc::new(AtomicU64::new(0)),
    };
    let checkpoints = if every == 0 {
        Checkpoints::never()
    } else {
        Checkpoints::every(every)
    };
    let handle = rebuno::resource::resource(key, driver, checkpoints).await?;
    handle.fetch_add(1, Ordering::Relaxed);
    Ok(json!(handle.load(Ordering::Relaxed)))
}

/// A durable LLM call to the fake provider (a JSON body or not, streamed or not), reading the
/// whole answer or only its first chunk.
async fn call_llm(
    json_body: bool,
    stream: bool,
    read: bool,
    deps: &Deps,
) -> Result<Value, HandlerError> {
    let body = if json_body {
        json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
            .to_string()
    } else {
        "not json".to_owned()
    };
    let request = http::Request::post("http://provider.invalid/v1/chat/completions")
        .header("content-type", "application/json")
        .body(Bytes::from(body))?;
    let response = DurableLlm::from_transport(deps.provider.clone())
        .send(request)
        .await?;
    if read {
        let text = response.into_body().text().await?;
        Ok(json!(text.len()))
    } else {
        let mut body = response.into_body();
        let _ = body.next().await;
        Ok(Value::Null)
    }
}

/// A random sequence of operator calls.
async fn client_calls(rng: &mut Rng, client: &Client) {
    for _ in 0..rng.range(1, 8) {
        let id = call_id(rng);
        match rng.below(16) {
            0 => create_execution(rng, client).await,
            1 => {
                let _ = client.get(&id).await;
            }
            2 => list_executions(rng, client).await,
            3 => {
                let _ = client
                    .events(&id, rng.below(3) as u64, rng.coin().then_some(10))
                    .await;
            }
            4 => {
                let _ = client.all_events(&id).await;
            }
            5 => {
                let _ = client.cancel(&id).await;
            }
            6 => fork_execution(rng, client, &id).await,
            7 => {
                let _ = client.fork_points(&id).await;
            }
            8 => list_steps(rng, client, &id).await,
            9 => {
                let _ = client.step(&id, &hex64(2)).await;
            }
            10 => list_approvals(rng, client).await,
            11 => {
                let _ = client.approval("ap1").await;
            }
            12 => {
                let _ = client.grant("ap1").by("ada").rationale("ok").send().await;
            }
            13 => {
                let _ = client
                    .deny("ap1")
                    .by(mutate::ident(rng))
                    .rationale("no")
                    .send()
                    .await;
            }
            14 => {
                let _ = client
                    .wait(&id, Duration::from_millis(rng.below(5_000) as u64))
                    .await;
            }
            _ => drain_stream(client, &id).await,
        }
    }
}

/// The execution an operator call names: `e1`, or sometimes a random (odd) identifier.
fn call_id(rng: &mut Rng) -> String {
    if rng.one_in(5) {
        mutate::ident(rng)
    } else {
        "e1".to_owned()
    }
}

/// `Client::create` with a random input, sometimes a session and idempotency key, sometimes
/// a parent and a principal.
async fn create_execution(rng: &mut Rng, client: &Client) {
    let mut create = client.create("fuzz").input(mutate::value(rng, 3));
    if rng.coin() {
        create = create.session(mutate::ident(rng)).idempotency_key("k");
    }
    if rng.coin() {
        create = create.spawned_by("p", hex64(1)).on_behalf_of("ada");
    }
    let _ = create.send().await;
}

/// `Client::list`, sometimes filtered and limited, sometimes by status from a cursor.
async fn list_executions(rng: &mut Rng, client: &Client) {
    let mut list = client.list();
    if rng.coin() {
        list = list
            .agent_id("fuzz")
            .session("s/1")
            .limit(rng.below(300) as u32);
    }
    if rng.coin() {
        list = list
            .status(rebuno::wire::ExecutionStatus::Running)
            .cursor("c&d");
    }
    let _ = list.send().await;
}

/// `Client::fork` of `id` at a random point, sometimes into a session, sometimes under a
/// policy bundle.
async fn fork_execution(rng: &mut Rng, client: &Client, id: &str) {
    let mut fork = client.fork(id, rng.below(10) as u64);
    if rng.coin() {
        fork = fork.session("s");
    }
    if rng.coin() {
        fork = fork.policy_bundle("b");
    }
    let _ = fork.send().await;
}

/// `Client::steps` of `id`, sometimes only the terminal ones.
async fn list_steps(rng: &mut Rng, client: &Client, id: &str) {
    let mut steps = client.steps(id);
    if rng.coin() {
        steps = steps.terminal_only();
    }
    let _ = steps.send().await;
}

/// `Client::approvals`, sometimes only the granted ones.
async fn list_approvals(rng: &mut Rng, client: &Client) {
    let mut approvals = client.approvals();
    if rng.coin() {
        approvals = approvals.status(rebuno::wire::ApprovalStatus::Granted);
    }
    let _ = approvals.send().await;
}

/// `Client::stream` of `id`, read to its end when the subscription succeeds.
async fn drain_stream(client: &Client, id: &str) {
    if let Ok(mut deltas) = client.stream(id).await {
        while deltas.next().await.is_some() {}
    }
}

pub(crate) fn case(rng: &mut Rng, recorder: &Recorder) {
    let secret = if rng.coin() {
        "dev-secret"
    } else {
        "s3cr3t-é"
    };
    let agent_id = if rng.one_in(4) {
        "agent with spaces/é".to_owned()
    } else {
        "fuzz".to_owned()
    };
    let prefix = if rng.one_in(4) { "/prefix" } else { "" };
    let token = rng.coin().then(|| "rk_test_123".to_owned());
    let execution_id = if rng.one_in(4) {
        mutate::ident(rng).chars().take(40).collect::<String>() + "e"
    } else {
        "0192f1a0-0000-7000-8000-000000000001".to_owned()
    };
    let state = Arc::new(Mutex::new(State {
        rng: rng.fork(),
        requests: 0,
        cutoff: rng.range(1, 60) as u32,
        secret: Secret::new(secret),
        agent_id: agent_id.clone(),
        token: token.clone(),
        origin: "http://127.0.0.1:1".to_owned(),
        prefix: prefix.to_owned(),
        execution_id: execution_id.clone(),
        next_step: 0,
        sane: *rng.pick(&[980, 900, 700, 400, 0]),
        log: Vec::new(),
    }));
    let plan = plan(rng);
    recorder.note("plan", format!("{plan:?}").as_bytes());
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        run(
            rng,
            &state,
            plan,
            secret,
            &agent_id,
            prefix,
            token,
            &execution_id,
        );
    }));
    if let Err(panic) = outcome {
        for (line, body) in lock(&state).log.iter() {
            recorder.note(line, body);
        }
        resume_unwind(panic);
    }
}

#[allow(clippy::too_many_arguments)]
fn run(
    rng: &mut Rng,
    state: &Arc<Mutex<State>>,
    plan: Plan,
    secret: &str,
    agent_id: &str,
    prefix: &str,
    token: Option<String>,
    execution_id: &str,
) {
    let kernel = Kernel {
        state: Arc::clone(state),
        agent: true,
    };
    let client_kernel = Kernel {
        state: Arc::clone(state),
        agent: false,
    };
    let base = format!(
        "http://127.0.0.1:1{prefix}{}",
        if rng.coin() { "/" } else { "" }
    );
    let (runtime, _clock) = runtime();
    let client = operator_client(base.clone(), &runtime, client_kernel, token);
    let builder = Agent::builder(agent_id)
        .secret(secret)
        .base_url(base)
        .runtime(runtime)
        .transport(kernel);
    let agent = build_agent(rng, builder, &client, plan);

    let runs = deliver(rng, &agent, &Secret::new(secret), execution_id);
    if rng.coin() {
        drive(join_all(runs), MAX_POLLS);
    } else {
        for run in runs {
            drive(run, MAX_POLLS);
        }
    }
    assert_eq!(
        agent.in_flight(),
        0,
        "runs left in flight after they all ended"
    );
    drive(agent.join(), 10);
    drive(client_calls(rng, &client), MAX_POLLS);
}

/// The operator client at `base`, on the fake kernel's client side, with the API key `token`
/// when there is one.
fn operator_client(
    base: String,
    runtime: &rebuno::rt::Runtime,
    kernel: Kernel,
    token: Option<String>,
) -> Client {
    let mut client = Client::builder()
        .base_url(base)
        .runtime(runtime.clone())
        .transport(kernel);
    if let Some(token) = token {
        client = client.api_key(token);
    }
    match client.build() {
        Ok(client) => client,
        Err(error) => panic!("client build failed: {error}"),
    }
}

/// The agent from `builder`, sometimes with a description and an input schema, whose handler
/// runs `plan` (taking a typed input, sometimes, that the execution's input may not fit).
fn build_agent(rng: &mut Rng, builder: rebuno::AgentBuilder, client: &Client, plan: Plan) -> Agent {
    let mut builder = builder;
    if rng.one_in(4) {
        builder = builder
            .description("fuzz agent")
            .input_schema(json!({"type": "object"}));
    }
    let deps = Deps {
        client: client.clone(),
        provider: Provider(Arc::new(Mutex::new(rng.fork()))),
    };
    let plan = Arc::new(plan);
    let builder = if rng.one_in(6) {
        #[derive(serde::Deserialize)]
        struct Typed {
            #[allow(dead_code)]
            n: u32,
        }
        builder.handler_with_state((Arc::clone(&plan), deps), |(plan, deps), _: Typed| {
            run_plan(plan, deps)
        })
    } else {
        builder.handler_with_state((Arc::clone(&plan), deps), |(plan, deps), _: Value| {
            run_plan(plan, deps)
        })
    };
    match builder.build() {
        Ok(agent) => agent,
        Err(error) => panic!("agent build failed: {error}"),
    }
}

/// Delivers 1 to 3 webhooks for `execution_id` signed with `secret` (the attempt going up or
/// not, one of two dispatches, a random lease, sometimes a deadline); each must be accepted.
/// Returns their background runs.
fn deliver(
    rng: &mut Rng,
    agent: &Agent,
    secret: &Secret,
    execution_id: &str,
) -> Vec<rebuno::rt::Task> {
    let mut runs = Vec::new();
    let mut attempt = 1;
    for _ in 0..rng.range(1, 3) {
        if rng.coin() {
            attempt += 1;
        }
        let lease = *rng.pick(&[1.0, 1.5, 30.0, 60.0, 600.0, 1e9]);
        let payload = json!({
            "execution_id": execution_id,
            "dispatch_id": if rng.one_in(3) { "d2" } else { "d1" },
            "dispatch_attempt": attempt,
            "lease_timeout_seconds": lease,
        })
        .to_string();
        let mut request = http::Request::post("/webhook")
            .header(
                "rebuno-signature",
                rebuno::signing::sign_webhook(secret, payload.as_bytes()),
            )
            .body(super::FuzzBody::full(Bytes::from(payload)))
            .unwrap_or_else(|e| panic!("webhook request: {e}"));
        if rng.one_in(5) {
            let at = EPOCH_MILLIS + rng.below(30_000) as u64;
            request
                .extensions_mut()
                .insert(Deadline::at_unix_millis(at));
        }
        let dispatch = drive(agent.handle(request), 10_000);
        if dispatch.response.status() != StatusCode::OK {
            let status = dispatch.response.status();
            let body = super::collect(dispatch.response.into_body());
            panic!("signed webhook refused: {status} {body:?}");
        }
        runs.extend(dispatch.background);
    }
    runs
}
