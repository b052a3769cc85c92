//! `webhook`: [`rebuno::Agent::handle`] and [`rebuno::Agent::route`] on mutated webhooks.
//!
//! Half the bodies are signed with the real signing function, so the payload parser is
//! reached; the rest get a missing, mis-schemed, wrong, garbage, truncated or huge signature.
//! Each answer is checked against a model of the documented behaviour: `405` for anything but
//! `POST`, `400` for a body that breaks, `413` past 64 KiB, `408` for a body that never
//! arrives, `401` exactly when the signature is wrong (under the secret or the previous one),
//! `400` exactly when the signed payload is malformed (not a JSON object, a missing field,
//! attempt 0, a lease under 1 s), `503` after `close`, else `200`, with a
//! background run unless this attempt, or a later one of its dispatch, was already admitted here. Background runs
//! are kept for a while or dropped, never run.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, StatusCode};
use rebuno::rt::Deadline;
use rebuno::{Agent, Route, Secret, signing};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{FuzzBody, UnusedTransport, collect, unhex};
use crate::Recorder;
use crate::exec::{EPOCH_MILLIS, drive, runtime};
use crate::mutate;
use crate::rng::Rng;

/// The SDK's limit on webhook bodies.
const MAX_BODY: usize = 64 * 1024;
/// The shortest lease the SDK accepts.
const MIN_LEASE: Duration = Duration::from_secs(1);

/// An independent mirror of the webhook payload, for the model.
#[derive(Deserialize)]
struct Payload {
    execution_id: String,
    dispatch_id: String,
    dispatch_attempt: u64,
    lease_timeout_seconds: f64,
}

/// `(execution_id, dispatch_id, attempt)` when `raw` is a payload the agent must accept.
fn well_formed(raw: &[u8]) -> Option<(String, String, u64)> {
    // The protocol's payload is an object (serde would take an array for a struct too).
    if raw.trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    let payload: Payload = serde_json::from_slice(raw).ok()?;
    let lease_ok = Duration::try_from_secs_f64(payload.lease_timeout_seconds)
        .is_ok_and(|lease| lease >= MIN_LEASE);
    (!payload.execution_id.is_empty()
        && !payload.dispatch_id.is_empty()
        && payload.dispatch_attempt > 0
        && lease_ok)
        .then_some((
            payload.execution_id,
            payload.dispatch_id,
            payload.dispatch_attempt,
        ))
}

/// Whether `header` is a correct `sha256=` signature of `body` (hex of either case).
fn signature_ok(secret: &Secret, body: &[u8], header: Option<&[u8]>) -> bool {
    let Some(header) = header else { return false };
    let Some(digits) = header.strip_prefix(b"sha256=") else {
        return false;
    };
    let good = signing::sign_webhook(secret, body);
    let expected = unhex(&good.as_bytes()[7..]);
    digits.len() == 64 && unhex(digits).is_some() && unhex(digits) == expected
}

/// A payload sample: valid most of the time, with edge values.
fn payload_sample(rng: &mut Rng) -> Value {
    let execution_id = match rng.below(4) {
        0 => mutate::ident(rng),
        _ => format!("0192f1a0-0000-7000-8000-{:012x}", rng.below(4)),
    };
    let edgy = rng.one_in(3);
    let attempt: Value = match if edgy { rng.below(8) } else { 7 } {
        0 => json!(0),
        1 => json!(u64::MAX),
        2 => json!(-1),
        3 => json!(1.5),
        _ => json!(rng.range(1, 4)),
    };
    let lease: Value = match if edgy { rng.below(10) } else { 9 } {
        0 => json!(0),
        1 => json!(1e-12),
        2 => json!(1e300),
        3 => json!(-5),
        4 => json!(18_446_744_073_709_551_615_u64),
        5 => json!(0.5),
        _ => json!(rng.range(1, 900)),
    };
    let mut payload = json!({
        "execution_id": execution_id,
        "dispatch_id": format!("d{}", rng.below(3)),
        "dispatch_attempt": attempt,
        "lease_timeout_seconds": lease,
    });
    if rng.one_in(4) {
        payload["extra"] = mutate::value(rng, 2);
    }
    payload
}

/// The previous secret some agents still accept (a rotation in progress).
const PREVIOUS: &str = "previous-secret";

const SAMPLES: &[&[u8]] = &[
    br#"{"execution_id":"e","dispatch_id":"d","dispatch_attempt":1,"lease_timeout_seconds":60}"#,
    br#"{"execution_id":"0192f1a0-0000-7000-8000-000000000000","dispatch_id":"d-1","dispatch_attempt":2,"lease_timeout_seconds":600.5}"#,
    br#"{"dispatch_attempt":1,"lease_timeout_seconds":1e-3,"dispatch_id":"x","execution_id":"y","more":[1,{"a":null}]}"#,
];

/// How the signature header is made.
fn signature_headers(rng: &mut Rng, secret: &Secret, body: &[u8]) -> Vec<Vec<u8>> {
    let good = signing::sign_webhook(secret, body).into_bytes();
    let mode = rng.below(24);
    match mode {
        0..=11 => vec![good],
        12 => vec![good.to_ascii_uppercase()],
        13 => {
            let mut upper_digits = good;
            upper_digits[7..].make_ascii_uppercase();
            vec![upper_digits]
        }
        14 => Vec::new(),
        15 => vec![wrong_scheme(rng, &good)],
        16 => {
            let mut other = body.to_vec();
            other.push(b'x');
            vec![signing::sign_webhook(secret, &other).into_bytes()]
        }
        17 => vec![signing::sign_webhook(&Secret::new(PREVIOUS), body).into_bytes()],
        18 => {
            let n = rng.len(120);
            vec![rng.bytes(n)]
        }
        19 => vec![huge_signature(rng)],
        20 => {
            let mut cut = good.clone();
            cut.truncate(rng.below(good.len()));
            vec![cut]
        }
        21 => vec![padded(rng, &good)],
        22 => flipped_and_good(rng, good),
        _ => {
            let mut mutated = good;
            mutate::mutate_bytes(rng, &mut mutated, &[]);
            vec![mutated]
        }
    }
}

/// The right digits of `good` behind a wrong or mis-spelled scheme.
fn wrong_scheme(rng: &mut Rng, good: &[u8]) -> Vec<u8> {
    let scheme = *rng.pick(&[
        &b"v1="[..],
        b"sha1=",
        b"SHA256=",
        b"sha256:",
        b"",
        b"sha256==",
    ]);
    let mut wrong = scheme.to_vec();
    wrong.extend_from_slice(&good[7..]);
    wrong
}

/// `sha256=` followed by 64 to 60,000 `a`s.
fn huge_signature(rng: &mut Rng) -> Vec<u8> {
    let n = rng.range(64, 60_000);
    let mut huge = b"sha256=".to_vec();
    huge.extend(std::iter::repeat_n(b'a', n));
    huge
}

/// `good` after a space, and sometimes before one.
fn padded(rng: &mut Rng, good: &[u8]) -> Vec<u8> {
    let mut padded = b" ".to_vec();
    padded.extend_from_slice(good);
    if rng.coin() {
        padded.push(b' ');
    }
    padded
}

/// Two headers, `good` and a copy with one digit changed, in a random order (only the first
/// counts).
fn flipped_and_good(rng: &mut Rng, good: Vec<u8>) -> Vec<Vec<u8>> {
    let mut flipped = good.clone();
    let at = rng.range(7, flipped.len() - 1);
    flipped[at] = if flipped[at] == b'0' { b'1' } else { b'0' };
    if rng.coin() {
        vec![flipped, good]
    } else {
        vec![good, flipped]
    }
}

/// The body bytes of one webhook: a (mutated) sample, a repeat of an earlier one, or an
/// oversized one.
fn body(rng: &mut Rng, earlier: &[Vec<u8>]) -> Vec<u8> {
    if !earlier.is_empty() && rng.one_in(4) {
        let previous = rng.pick(earlier).clone();
        if rng.coin() {
            return previous;
        }
        // The same dispatch, one attempt later (or a new dispatch of the same execution).
        if let Ok(mut value) = serde_json::from_slice::<Value>(&previous)
            && value.is_object()
        {
            if rng.coin() {
                let attempt = value["dispatch_attempt"].as_u64().unwrap_or(0);
                value["dispatch_attempt"] = json!(attempt.saturating_add(1));
            } else {
                value["dispatch_id"] = json!(mutate::ident(rng));
            }
            return mutate::render(rng, &value);
        }
        return previous;
    }
    if rng.one_in(60) {
        let n = *rng.pick(&[MAX_BODY - 1, MAX_BODY, MAX_BODY + 1, 3 * MAX_BODY, 1 << 20]);
        let mut big = br#"{"execution_id":"e","dispatch_id":"d","dispatch_attempt":1,"lease_timeout_seconds":60,"pad":""#.to_vec();
        let pad = n.saturating_sub(big.len() + 2);
        big.extend(std::iter::repeat_n(b'p', pad));
        big.extend_from_slice(b"\"}");
        return big;
    }
    let sample = payload_sample(rng);
    if rng.coin() {
        return mutate::render(rng, &sample);
    }
    mutate::json_variant(rng, &sample, SAMPLES).0
}

struct Webhook {
    method: Method,
    headers: Vec<(HeaderName, HeaderValue)>,
    chunks: Vec<Vec<u8>>,
    fail_after: Option<usize>,
    stall: bool,
    trailers: bool,
    deadline: Option<Deadline>,
}

impl Webhook {
    fn request(&self) -> http::Request<FuzzBody> {
        let body = FuzzBody::new(self.chunks.clone(), self.fail_after, self.trailers);
        let mut request = http::Request::new(if self.stall { body.stalling() } else { body });
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = http::Uri::from_static("/webhook");
        for (name, value) in &self.headers {
            request.headers_mut().append(name.clone(), value.clone());
        }
        if let Some(deadline) = self.deadline {
            request.extensions_mut().insert(deadline);
        }
        request
    }
}

/// What the agent must answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    MethodNotAllowed,
    Unreadable,
    TooLarge,
    TooSlow,
    BadSignature,
    Malformed,
    Unavailable,
    Accepted,
}

impl Expect {
    fn status(self) -> StatusCode {
        match self {
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::Unreadable | Self::Malformed => StatusCode::BAD_REQUEST,
            Self::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::TooSlow => StatusCode::REQUEST_TIMEOUT,
            Self::BadSignature => StatusCode::UNAUTHORIZED,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::Accepted => StatusCode::OK,
        }
    }

    fn code(self) -> &'static str {
        match self {
            Self::MethodNotAllowed => "method_not_allowed",
            Self::Unreadable | Self::Malformed => "validation_error",
            Self::TooLarge => "payload_too_large",
            Self::TooSlow => "request_timeout",
            Self::BadSignature => "unauthorized",
            Self::Unavailable => "unavailable",
            Self::Accepted => "",
        }
    }
}

/// The agent's registry, as the model sees it: runs kept alive, and every (dispatch, highest
/// attempt) admitted per execution. (Few executions per case, so the SDK's bounds on what it
/// remembers are never reached.)
#[derive(Default)]
struct Registry {
    running: HashMap<String, u64>,
    admitted: HashMap<String, Vec<(String, u64)>>,
    serial: u64,
}

impl Registry {
    /// `Some(serial)` when the dispatch must run.
    fn admit(&mut self, execution_id: &str, dispatch_id: &str, attempt: u64) -> Option<u64> {
        let seen = self.admitted.entry(execution_id.to_owned()).or_default();
        if seen.iter().any(|(d, a)| d == dispatch_id && attempt <= *a) {
            return None;
        }
        match seen.iter_mut().find(|(d, _)| d == dispatch_id) {
            Some((_, a)) => *a = attempt,
            None => seen.push((dispatch_id.to_owned(), attempt)),
        }
        self.serial += 1;
        self.running.insert(execution_id.to_owned(), self.serial);
        Some(self.serial)
    }

    /// A run was dropped: forgotten unless a newer one replaced it.
    fn drop_run(&mut self, execution_id: &str, serial: u64) {
        if self.running.get(execution_id) == Some(&serial) {
            self.running.remove(execution_id);
        }
    }
}

/// An agent without a handler is never built (there is no "no handler" state to answer `503`
/// in): `build()` fails with a configuration error naming `.handler`.
fn no_handler_is_refused(runtime: &rebuno::rt::Runtime) {
    let built = Agent::builder("fuzz-agent")
        .secret("dev-secret")
        .base_url("http://127.0.0.1:1")
        .runtime(runtime.clone())
        .transport(UnusedTransport::default())
        .build();
    match built {
        Ok(agent) => panic!("an agent without a handler was built: {agent:?}"),
        Err(error) => {
            assert_eq!(error.kind(), rebuno::ErrorKind::Config, "{error}");
            assert!(error.to_string().contains(".handler"), "{error}");
        }
    }
}

/// The agent under test and what the model knows of its configuration.
struct Subject {
    agent: Agent,
    secret: Secret,
    /// Whether the agent also accepts signatures under [`PREVIOUS`].
    rotating: bool,
    /// Whether the agent was closed before the first webhook.
    closed: bool,
    /// How many times the agent called its transport (must stay 0).
    calls: Arc<AtomicUsize>,
}

/// What a case carries from one webhook to the next.
#[derive(Default)]
struct Rounds {
    /// The model of the agent's registry.
    model: Registry,
    /// The background runs kept so far, as a host would: execution id, model serial, task.
    kept: Vec<(String, u64, rebuno::rt::Task)>,
    /// Every body sent so far (later webhooks repeat some).
    bodies: Vec<Vec<u8>>,
}

pub(crate) fn case(rng: &mut Rng, recorder: &Recorder) {
    let (runtime, _clock) = runtime();
    let subject = subject(rng, recorder, &runtime);
    let mut rounds = Rounds::default();
    for round in 0..rng.range(1, 5) {
        webhook_round(rng, recorder, &subject, &mut rounds, round);
    }
    let Rounds {
        mut model, kept, ..
    } = rounds;
    for (execution_id, serial, task) in kept {
        drop(task);
        model.drop_run(&execution_id, serial);
    }
    assert_eq!(subject.agent.in_flight(), 0, "dropped runs stay in flight");
    assert_eq!(
        subject.calls.load(Ordering::Relaxed),
        0,
        "handle must not call the kernel"
    );
}

/// The agent under test, on `runtime`: a random secret, sometimes a key rotation in progress,
/// sometimes closed before the first webhook. Sometimes also checks that a builder without a
/// handler is refused.
fn subject(rng: &mut Rng, recorder: &Recorder, runtime: &rebuno::rt::Runtime) -> Subject {
    let secret_text = match rng.below(4) {
        0 => "s".to_owned(),
        1 => "x".repeat(rng.range(65, 300)),
        2 => "dev-secret-é🙂".to_owned(),
        _ => "dev-secret".to_owned(),
    };
    recorder.note("secret", secret_text.as_bytes());
    let secret = Secret::new(secret_text.clone());
    let rotating = rng.one_in(4);
    let transport = UnusedTransport::default();
    let calls = transport.0.clone();
    let mut builder = Agent::builder("fuzz-agent")
        .secret(secret_text)
        .base_url("http://127.0.0.1:1")
        .runtime(runtime.clone())
        .transport(transport);
    if rotating {
        builder = builder.previous_secret(PREVIOUS);
    }
    if rng.one_in(20) {
        no_handler_is_refused(runtime);
    }
    let agent = match builder
        .handler(|_: Value| async { Ok::<_, rebuno::HandlerError>(json!({"ok": true})) })
        .build()
    {
        Ok(agent) => agent,
        Err(error) => panic!("agent build failed: {error}"),
    };
    let closed = rng.one_in(40);
    if closed {
        drive(agent.close(), 100);
    }
    Subject {
        agent,
        secret,
        rotating,
        closed,
        calls,
    }
}

/// One webhook: generated, sent (through `Agent::route` first, sometimes), its answer checked
/// against the model; then some of the kept runs are dropped.
fn webhook_round(
    rng: &mut Rng,
    recorder: &Recorder,
    subject: &Subject,
    rounds: &mut Rounds,
    round: usize,
) {
    let raw = body(rng, &rounds.bodies);
    rounds.bodies.push(raw.clone());
    let (webhook, first_signature) = random_webhook(rng, &subject.secret, &raw);
    note_webhook(recorder, round, &webhook, &raw);

    // The model.
    let payload = well_formed(&raw);
    let expect = expected(
        subject,
        &webhook,
        &raw,
        first_signature.as_deref(),
        payload.is_some(),
    );

    if super::kernel::trace() {
        eprintln!("TRACE {expect:?}");
    }

    // Agent::route first, sometimes, forwarding its request to handle as a host would.
    let forwarded = if rng.one_in(4) {
        check_route(&subject.agent, &webhook, expect, payload.as_ref(), &raw)
    } else {
        None
    };

    let dispatch = handle(&subject.agent, &webhook, forwarded);
    check_dispatch(
        dispatch,
        expect,
        first_signature.as_deref(),
        payload,
        rounds,
    );
    let agent = &subject.agent;
    assert_eq!(
        agent.in_flight(),
        rounds.model.running.len(),
        "runs in flight"
    );
    drop_some_runs(rng, rounds);
    assert_eq!(
        agent.in_flight(),
        rounds.model.running.len(),
        "runs in flight after drops"
    );
}

/// The request of one round for the body `raw`: method, headers, chunks, a break or a stall,
/// trailers, a deadline. Also returns the first signature header, the one the model checks.
fn random_webhook(rng: &mut Rng, secret: &Secret, raw: &[u8]) -> (Webhook, Option<Vec<u8>>) {
    let method = webhook_method(rng);
    let (headers, first_signature) = webhook_headers(rng, secret, raw);
    let chunks = mutate::chunks(rng, raw);
    let fail_after = rng
        .one_in(40)
        .then(|| rng.below(3))
        .filter(|&n| n <= chunks.len());
    let stall = fail_after.is_none() && rng.one_in(60);
    let webhook = Webhook {
        method,
        headers,
        fail_after,
        stall,
        trailers: rng.one_in(30),
        deadline: rng
            .one_in(10)
            .then(|| Deadline::at_unix_millis(EPOCH_MILLIS + rng.below(20_000) as u64)),
        chunks,
    };
    (webhook, first_signature)
}

/// `POST`, or rarely another method (which the agent must refuse).
fn webhook_method(rng: &mut Rng) -> Method {
    if rng.one_in(12) {
        rng.pick(&[
            Method::GET,
            Method::PUT,
            Method::DELETE,
            Method::HEAD,
            Method::PATCH,
            Method::OPTIONS,
        ])
        .clone()
    } else {
        Method::POST
    }
}

/// The headers of one round: the signature header(s) for `raw` under one spelling of the
/// name, sometimes a timestamp and a content type. Also returns the first signature value.
fn webhook_headers(
    rng: &mut Rng,
    secret: &Secret,
    raw: &[u8],
) -> (Vec<(HeaderName, HeaderValue)>, Option<Vec<u8>>) {
    let mut headers = Vec::new();
    let signature_name = if rng.coin() {
        HeaderName::from_static("rebuno-signature")
    } else {
        HeaderName::from_bytes(b"Rebuno-Signature")
            .unwrap_or(HeaderName::from_static("rebuno-signature"))
    };
    let mut first_signature: Option<Vec<u8>> = None;
    for value in signature_headers(rng, secret, raw) {
        // Bytes a header cannot hold never reach an agent; skip them.
        if let Ok(header) = HeaderValue::from_bytes(&value) {
            first_signature.get_or_insert_with(|| value.clone());
            headers.push((signature_name.clone(), header));
        }
    }
    if rng.one_in(3) {
        let stamp = *rng.pick(&["1700000000", "0", "-1", "99999999999999999999", "nope"]);
        headers.push((
            HeaderName::from_static("rebuno-timestamp"),
            HeaderValue::from_static(stamp),
        ));
    }
    if rng.one_in(4) {
        headers.push((
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        ));
    }
    (headers, first_signature)
}

/// Records the round's method, headers and body.
fn note_webhook(recorder: &Recorder, round: usize, webhook: &Webhook, raw: &[u8]) {
    recorder.note(
        &format!("round {round} method"),
        webhook.method.as_str().as_bytes(),
    );
    for (name, value) in &webhook.headers {
        recorder.note(&format!("round {round} header {name}"), value.as_bytes());
    }
    let (fail_after, stall) = (webhook.fail_after, webhook.stall);
    recorder.note(
        &format!("round {round} body (fail_after {fail_after:?}, stall {stall})"),
        raw,
    );
}

/// What the model says the agent must answer to `webhook` (body `raw`, first signature header
/// `signature`, a well-formed payload or not), its checks taken in the agent's order.
fn expected(
    subject: &Subject,
    webhook: &Webhook,
    raw: &[u8],
    signature: Option<&[u8]>,
    well_formed: bool,
) -> Expect {
    let signed = signature_ok(&subject.secret, raw, signature)
        || (subject.rotating && signature_ok(&Secret::new(PREVIOUS), raw, signature));
    let fail_after = webhook.fail_after;
    if webhook.method != Method::POST {
        Expect::MethodNotAllowed
    } else if webhook.stall {
        Expect::TooSlow
    } else if raw.len() > MAX_BODY && fail_after.is_none_or(|n| n > 0) {
        // The limit trips on the first chunk past it; a break before that comes first.
        expect_size(&webhook.chunks, fail_after)
    } else if fail_after.is_some() {
        Expect::Unreadable
    } else if !signed {
        Expect::BadSignature
    } else if !well_formed {
        Expect::Malformed
    } else if subject.closed {
        Expect::Unavailable
    } else {
        Expect::Accepted
    }
}

/// `Agent::route` on `webhook`: it runs exactly what the model accepts (or would but for
/// `close`), naming the payload's execution with the body unchanged, and otherwise replies
/// with the model's status and error body. Returns the request it hands on to `handle`.
fn check_route(
    agent: &Agent,
    webhook: &Webhook,
    expect: Expect,
    payload: Option<&(String, String, u64)>,
    raw: &[u8],
) -> Option<http::Request<Bytes>> {
    match drive(agent.route(webhook.request()), 10_000) {
        Route::Run {
            execution_id,
            request,
        } => {
            let routable = matches!(expect, Expect::Accepted | Expect::Unavailable);
            assert!(
                routable,
                "route ran a webhook the model refuses ({expect:?})"
            );
            assert_eq!(
                Some(execution_id.as_str()),
                payload.map(|p| p.0.as_str()),
                "route named another execution"
            );
            assert_eq!(request.body().as_ref(), raw, "route changed the body");
            Some(request)
        }
        Route::Reply(response) => {
            let status = response.status();
            assert!(
                !matches!(expect, Expect::Accepted | Expect::Unavailable),
                "route refused ({status}) a webhook the model accepts"
            );
            assert_eq!(status, expect.status(), "route status");
            check_error_body(collect(response.into_body()), expect);
            None
        }
        other => panic!("unexpected route {other:?}"),
    }
}

/// `Agent::handle` on the request `route` forwarded, if any, else on the webhook itself.
fn handle(
    agent: &Agent,
    webhook: &Webhook,
    forwarded: Option<http::Request<Bytes>>,
) -> rebuno::Dispatch {
    match forwarded {
        Some(request) => {
            let request = request.map(FuzzBody::full);
            drive(agent.handle(request), 10_000)
        }
        None => drive(agent.handle(webhook.request()), 10_000),
    }
}

/// `Agent::handle`'s answer: a status the protocol uses, the model's status, and a background
/// run exactly when the model admits the dispatch (kept in `rounds`); a refusal has the
/// model's error body and no run.
fn check_dispatch(
    dispatch: rebuno::Dispatch,
    expect: Expect,
    first_signature: Option<&[u8]>,
    payload: Option<(String, String, u64)>,
    rounds: &mut Rounds,
) {
    let status = dispatch.response.status();
    assert!(
        [200, 400, 401, 405, 408, 413, 503].contains(&status.as_u16()),
        "status {status} is not one the protocol uses"
    );
    assert_eq!(
        status,
        expect.status(),
        "expected {expect:?}; signature header {:?}",
        first_signature.map(|s| mutate::escape(s, 100))
    );
    if expect == Expect::Accepted {
        let Some((execution_id, dispatch_id, attempt)) = payload else {
            unreachable!("accepted implies a payload")
        };
        let serial = rounds.model.admit(&execution_id, &dispatch_id, attempt);
        assert_eq!(
            dispatch.background.is_some(),
            serial.is_some(),
            "background run presence (model: {})",
            if serial.is_some() { "run" } else { "duplicate" }
        );
        assert!(collect(dispatch.response.into_body()).is_empty());
        if let (Some(serial), Some(task)) = (serial, dispatch.background) {
            rounds.kept.push((execution_id, serial, task));
        }
    } else {
        assert!(dispatch.background.is_none(), "a refused webhook got a run");
        check_error_body(collect(dispatch.response.into_body()), expect);
    }
}

/// Drops some of the runs kept so far (a coin for each), as a host that gives up on them would.
fn drop_some_runs(rng: &mut Rng, rounds: &mut Rounds) {
    let Rounds { model, kept, .. } = rounds;
    kept.retain_mut(|(execution_id, serial, _)| {
        if rng.coin() {
            model.drop_run(execution_id, *serial);
            false
        } else {
            true
        }
    });
}

/// `413` when the data before the break (or all of it) passes the limit, else `400`.
fn expect_size(chunks: &[Vec<u8>], fail_after: Option<usize>) -> Expect {
    let delivered = fail_after.map_or(chunks.len(), |n| n.min(chunks.len()));
    let total: usize = chunks[..delivered].iter().map(Vec::len).sum();
    if total > MAX_BODY {
        Expect::TooLarge
    } else {
        Expect::Unreadable
    }
}

fn check_error_body(body: Bytes, expect: Expect) {
    let parsed: Value = match serde_json::from_slice(&body) {
        Ok(value) => value,
        Err(error) => panic!("error body is not JSON ({error}): {body:?}"),
    };
    assert_eq!(
        parsed["code"],
        json!(expect.code()),
        "error code in {parsed}"
    );
    assert!(parsed["message"].is_string(), "error message in {parsed}");
}
