//! The webhook's answers to bad input, over real HTTP: nothing is run and nothing is lost.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;

use rebuno::HandlerError;
use rebuno::signing::sign_webhook;
use rebuno::wire::ExecutionStatus;
use serde_json::Value;
use support::*;

async fn post(url: &str, body: &str, signature: Option<String>) -> reqwest::Response {
    let mut request = reqwest::Client::new().post(url).body(body.to_owned());
    if let Some(signature) = signature {
        request = request.header("Rebuno-Signature", signature);
    }
    request.send().await.expect("POST webhook")
}

const PAYLOAD: &str = r#"{"execution_id":"0192f1a0-0000-7000-8000-000000000000","dispatch_id":"01920000-0000-7000-8000-000000000001","dispatch_attempt":1,"lease_timeout_seconds":120}"#;

#[tokio::test]
async fn bad_or_missing_signatures_get_401_and_start_nothing() {
    let _trace = trace_init();
    let (_kernel, served) = kernel_with("guarded", |agent| {
        agent.handler(|_: Value| async { Ok::<_, HandlerError>(()) })
    })
    .await;
    let url = served.webhook_url();
    let forged = sign_webhook(&rebuno::Secret::new("not-the-secret"), PAYLOAD.as_bytes());

    assert_eq!(post(&url, PAYLOAD, None).await.status(), 401);
    assert_eq!(post(&url, PAYLOAD, Some(forged)).await.status(), 401);
    assert_eq!(
        post(&url, PAYLOAD, Some("sha256=zz".into())).await.status(),
        401
    );
    let tampered = sign_webhook(&rebuno::Secret::new(SECRET), PAYLOAD.as_bytes());
    assert_eq!(
        post(
            &url,
            &PAYLOAD.replace("\"dispatch_attempt\":1", "\"dispatch_attempt\":9"),
            Some(tampered)
        )
        .await
        .status(),
        401
    );
    served.shutdown().await;
}

#[tokio::test]
async fn malformed_payloads_get_400() {
    let _trace = trace_init();
    let (_kernel, served) = kernel_with("picky", |agent| {
        agent.handler(|_: Value| async { Ok::<_, HandlerError>(()) })
    })
    .await;
    let url = served.webhook_url();
    for body in [
        "not json",
        r#"{"execution_id":"e"}"#,
        r#"{"execution_id":"e","dispatch_id":"d","dispatch_attempt":0,"lease_timeout_seconds":120}"#,
    ] {
        let signed = sign_webhook(&rebuno::Secret::new(SECRET), body.as_bytes());
        let response = post(&url, body, Some(signed)).await;
        assert_eq!(response.status(), 400, "{body}");
        let envelope: Value = response.json().await.expect("JSON error body");
        assert_eq!(envelope["code"], "validation_error");
    }
    served.shutdown().await;
}

#[tokio::test]
async fn the_agent_acknowledges_before_the_run_finishes() {
    let _trace = trace_init();
    let (release, released) = tokio::sync::watch::channel(false);
    let (kernel, served) = kernel_with("slow", move |agent| {
        agent.handler_with_state(released, |mut released, _: Value| async move {
            let _ = released.wait_for(|go| *go).await;
            Ok::<_, HandlerError>("done")
        })
    })
    .await;
    let created = kernel
        .create_execution(rebuno_devkernel::NewExecution::new(
            "slow",
            serde_json::json!({}),
        ))
        .await
        .expect("create");
    for _ in 0..200 {
        if kernel
            .events(&created.id)
            .iter()
            .any(|e| e.kind == "dispatch.acked")
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(
        kernel.execution(&created.id).expect("exists").status,
        ExecutionStatus::Running
    );
    assert!(
        kernel
            .events(&created.id)
            .iter()
            .any(|e| e.kind == "dispatch.acked"),
        "acked while the handler still waits"
    );
    release.send(true).expect("release");
    let done = kernel.wait_terminal(&created.id, WAIT).await.expect("ends");
    assert_eq!(done.output, Some(serde_json::json!("done")));
    served.shutdown().await;
}

/// `Agent::route` answers bad webhooks as `handle` would, and hands a good one back unchanged
/// with its execution id, running nothing: what a front end that forwards each execution to a
/// runner of its own (a Durable Object on Workers) needs.
#[tokio::test]
async fn route_checks_a_webhook_and_names_its_execution_without_running_it() {
    use rebuno::Route;

    let agent = rebuno::Agent::builder("router")
        .base_url("http://127.0.0.1:9")
        .secret(SECRET)
        .handler(|_: Value| async { Ok::<_, HandlerError>(()) })
        .build()
        .unwrap();
    let request = |method: &str, body: &str, signature: Option<&str>| {
        let mut builder = http::Request::builder().method(method).uri("/");
        if let Some(signature) = signature {
            builder = builder.header("Rebuno-Signature", signature);
        }
        builder.body(rebuno::Body::from(body.to_owned())).unwrap()
    };
    let signed = sign_webhook(&rebuno::Secret::new(SECRET), PAYLOAD.as_bytes());

    match agent.route(request("POST", PAYLOAD, Some(&signed))).await {
        Route::Run {
            execution_id,
            request,
        } => {
            assert_eq!(execution_id, "0192f1a0-0000-7000-8000-000000000000");
            assert_eq!(
                request.body().as_ref(),
                PAYLOAD.as_bytes(),
                "body as signed"
            );
            assert_eq!(request.headers()["Rebuno-Signature"], signed.as_str());
        }
        other => panic!("a good webhook is routed, got {other:?}"),
    }
    assert_eq!(agent.in_flight(), 0, "routing runs nothing");

    let forged = sign_webhook(&rebuno::Secret::new("not-the-secret"), PAYLOAD.as_bytes());
    let not_json = sign_webhook(&rebuno::Secret::new(SECRET), b"not json");
    for (request, status) in [
        (request("POST", PAYLOAD, None), 401),
        (request("POST", PAYLOAD, Some(&forged)), 401),
        (request("POST", "not json", Some(&not_json)), 400),
        (request("PUT", PAYLOAD, Some(&signed)), 405),
    ] {
        match agent.route(request).await {
            Route::Reply(response) => assert_eq!(response.status(), status),
            other => panic!("expected a {status} reply, got {other:?}"),
        }
    }
}

/// Payloads that are JSON but not the protocol's object, and leases no kernel would send.
#[tokio::test]
async fn arrays_and_absurd_leases_get_400() {
    let agent = rebuno::Agent::builder("strict")
        .base_url("http://127.0.0.1:9")
        .secret(SECRET)
        .handler(|_: Value| async { Ok::<_, HandlerError>(()) })
        .build()
        .unwrap();
    for body in [
        r#"["0192f1a0-0000-7000-8000-000000000000","01920000-0000-7000-8000-000000000001",1,120]"#,
        &PAYLOAD.replace("120}", "1e-9}"),
        &PAYLOAD.replace("120}", "0.5}"),
        &PAYLOAD.replace("120}", "1e300}"),
    ] {
        let signed = sign_webhook(&rebuno::Secret::new(SECRET), body.as_bytes());
        let request = http::Request::post("/webhook")
            .header("Rebuno-Signature", signed)
            .body(rebuno::Body::from(body.to_owned()))
            .unwrap();
        let dispatch = agent.handle(request).await;
        assert_eq!(dispatch.response.status(), 400, "{body}");
        assert!(dispatch.background.is_none(), "{body}");
    }
    assert_eq!(agent.in_flight(), 0);
}

/// An oversized body is refused with 413 over real HTTP, and the server keeps serving.
#[tokio::test]
async fn an_oversized_body_gets_413() {
    let _trace = trace_init();
    let (_kernel, served) = kernel_with("roomy", |agent| {
        agent.handler(|_: Value| async { Ok::<_, HandlerError>(()) })
    })
    .await;
    let url = served.webhook_url();
    let huge = format!("{{\"pad\":\"{}\"}}", "x".repeat(70 * 1024));
    let signed = sign_webhook(&rebuno::Secret::new(SECRET), huge.as_bytes());
    let response = post(&url, &huge, Some(signed)).await;
    assert_eq!(response.status(), 413);
    let envelope: Value = response.json().await.expect("JSON error body");
    assert_eq!(envelope["code"], "payload_too_large");
    assert_eq!(
        post(&url, PAYLOAD, None).await.status(),
        401,
        "still serving"
    );
    served.shutdown().await;
}

/// Sleeps a hundredth of what it is asked, so a 10 s limit passes in 100 ms.
#[derive(Debug)]
struct Hurried;

impl rebuno::rt::Sleep for Hurried {
    fn sleep(&self, duration: std::time::Duration) -> rebuno::rt::Delay {
        rebuno::rt::Delay::new(tokio::time::sleep(duration / 100))
    }
}

/// A client that sends part of a body and then nothing cannot hold the request: after the body
/// timeout it gets 408 and nothing runs.
#[tokio::test]
async fn a_trickled_body_gets_408() {
    use futures_util::StreamExt;

    let runtime = rebuno::rt::Runtime::new(
        rebuno::rt::TokioRuntime::new(),
        Hurried,
        rebuno::rt::SystemClock::default(),
    );
    let agent = rebuno::Agent::builder("patient")
        .base_url("http://127.0.0.1:9")
        .secret(SECRET)
        .runtime(runtime)
        .handler(|_: Value| async { Ok::<_, HandlerError>(()) })
        .build()
        .unwrap();
    let first = bytes::Bytes::from_static(&PAYLOAD.as_bytes()[..20]);
    let chunks = futures_util::stream::once(async move {
        Ok::<_, std::convert::Infallible>(http_body::Frame::data(first))
    })
    .chain(futures_util::stream::pending());
    let request = http::Request::post("/webhook")
        .header(
            "Rebuno-Signature",
            sign_webhook(&rebuno::Secret::new(SECRET), PAYLOAD.as_bytes()),
        )
        .body(http_body_util::StreamBody::new(chunks))
        .unwrap();
    let dispatch = tokio::time::timeout(std::time::Duration::from_secs(5), agent.handle(request))
        .await
        .expect("the body timeout answers");
    assert_eq!(dispatch.response.status(), 408);
    assert!(dispatch.background.is_none());
}
