//! Criterion micro-benchmarks of the SDK's per-request CPU costs: the two HMAC signatures,
//! canonical JSON (the dev kernel's step identity) and webhook parsing (`Agent::handle` on a
//! signed request, with a runtime that never runs the background task).
//!
//! `cargo bench -p rebuno-bench --bench micro`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::cell::Cell;
use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use futures_util::FutureExt as _;
use http_body_util::Full;
use rebuno::rt::{Delay, Runtime, Sleep, Spawn, SystemClock, Task};
use rebuno::signing::{RequestSignature, sign_webhook, verify_webhook};
use rebuno::{Agent, HandlerError, Secret};
use rebuno_devkernel::identity::canonical_json;

const EXECUTION: &str = "0192f1a0-0000-7000-8000-000000000000";
const DISPATCH: &str = "0192f1a0-0000-7000-8000-0000000000aa";

fn signing(c: &mut Criterion) {
    let secret = Secret::new("bench-secret");
    let target = format!("/v0/executions/{EXECUTION}/steps");
    let body = br#"{"kind":"tool_call","target":"noop","args":{"i":3},"idempotency":"safe_to_retry","resources":[]}"#;
    let webhook = format!(
        r#"{{"execution_id":"{EXECUTION}","dispatch_id":"{DISPATCH}","dispatch_attempt":1,"lease_timeout_seconds":120}}"#
    );
    let header = sign_webhook(&secret, webhook.as_bytes());
    let mut group = c.benchmark_group("signing");
    group.bench_function("RequestSignature::sign (submit)", |b| {
        b.iter(|| {
            RequestSignature {
                method: "POST",
                target: black_box(&target),
                timestamp: "1700000000",
                dispatch_id: DISPATCH,
                attempt: "1",
            }
            .sign(&secret, black_box(body))
        });
    });
    group.bench_function("sign_webhook", |b| {
        b.iter(|| sign_webhook(&secret, black_box(webhook.as_bytes())));
    });
    group.bench_function("verify_webhook", |b| {
        b.iter(|| {
            verify_webhook(
                &secret,
                black_box(webhook.as_bytes()),
                Some(black_box(header.as_bytes())),
            )
        });
    });
    group.finish();
}

fn canonical(c: &mut Criterion) {
    let small = br#"{"i": 3}"#.to_vec();
    let medium = serde_json::to_vec(&serde_json::json!({
        "query": "durable execution for agents",
        "filters": {"lang": ["en", "de", "fr"], "year": {"from": 2020, "to": 2026}, "score": 0.75},
        "limit": 25,
        "cursor": null,
        "tags": (0..20).map(|i| format!("tag-{i}")).collect::<Vec<_>>(),
        "nested": {"z": {"y": {"x": [1, 2.5, -3e2, true, false, "\u{e9}\n"]}}},
    }))
    .unwrap();
    let mut group = c.benchmark_group("canonical_json");
    group.bench_function(format!("small ({} B)", small.len()), |b| {
        b.iter(|| canonical_json(black_box(&small)));
    });
    group.bench_function(format!("medium ({} B)", medium.len()), |b| {
        b.iter(|| canonical_json(black_box(&medium)));
    });
    group.finish();
}

/// Drops every background task unrun.
#[derive(Debug)]
struct Discard;

impl Spawn for Discard {
    fn spawn(&self, task: Task) {
        drop(task);
    }
}

/// Never wakes.
#[derive(Debug)]
struct Never;

impl Sleep for Never {
    fn sleep(&self, _: Duration) -> Delay {
        Delay::new(std::future::pending())
    }
}

fn webhook(c: &mut Criterion) {
    let secret = Secret::new("bench-secret");
    let agent = Agent::builder("bench")
        .secret("bench-secret")
        .base_url("http://127.0.0.1:9")
        .runtime(Runtime::new(Discard, Never, SystemClock::default()))
        .handler(|_: serde_json::Value| async { Ok::<_, HandlerError>(serde_json::json!({})) })
        .build()
        .unwrap();
    // Each request is a newer attempt of the same execution: it is admitted (superseding the
    // previous, never-run one), so the registry stays at one entry.
    let attempt = Cell::new(0u64);
    let request = || {
        attempt.set(attempt.get() + 1);
        let body = format!(
            r#"{{"execution_id":"{EXECUTION}","dispatch_id":"{DISPATCH}","dispatch_attempt":{},"lease_timeout_seconds":120}}"#,
            attempt.get()
        );
        let signature = sign_webhook(&secret, body.as_bytes());
        http::Request::post("/webhook")
            .header("Content-Type", "application/json")
            .header("Rebuno-Signature", signature)
            .header("Rebuno-Execution-Id", EXECUTION)
            .body(Full::new(Bytes::from(body)))
            .unwrap()
    };
    let mut group = c.benchmark_group("webhook");
    group.bench_function("Agent::handle (signed dispatch, 200)", |b| {
        b.iter_batched(
            request,
            |request| {
                let dispatch = agent
                    .handle(request)
                    .now_or_never()
                    .expect("handle is ready");
                assert_eq!(dispatch.response.status(), 200);
                dispatch
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

criterion_group!(benches, signing, canonical, webhook);
criterion_main!(benches);
