//! Secret rotation without downtime, and no secret in any `Debug`, log line or error text.

use crate::support;
use rebuno::wire::ExecutionStatus;

use std::convert::Infallible;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rebuno::signing::sign_webhook;
use rebuno::{Agent, HandlerError, step};
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::{Value, json};
use support::*;

const OLD: &str = "old-s3cret-7f1c0d";
const NEW: &str = "new-s3cret-9a2e44";

const PAYLOAD: &str = r#"{"execution_id":"0192f1a0-0000-7000-8000-000000000000","dispatch_id":"01920000-0000-7000-8000-000000000001","dispatch_attempt":1,"lease_timeout_seconds":120}"#;

fn signed(secret: &str, body: &str) -> http::Request<rebuno::Body> {
    http::Request::post("/webhook")
        .header(
            "Rebuno-Signature",
            sign_webhook(&rebuno::Secret::new(secret), body.as_bytes()),
        )
        .body(rebuno::Body::from(body.to_owned()))
        .unwrap()
}

#[tokio::test]
async fn webhooks_signed_with_the_current_or_the_previous_secret_are_accepted() {
    let agent = Agent::builder("rotating")
        .secret(NEW)
        .previous_secret(OLD)
        .base_url("http://127.0.0.1:9")
        .handler(|_: Value| async { Ok::<_, HandlerError>(()) })
        .build()
        .unwrap();
    let attempt = |n: u32| {
        PAYLOAD.replace(
            "\"dispatch_attempt\":1",
            &format!("\"dispatch_attempt\":{n}"),
        )
    };
    assert_eq!(
        agent
            .handle(signed(NEW, &attempt(1)))
            .await
            .response
            .status(),
        200
    );
    assert_eq!(
        agent
            .handle(signed(OLD, &attempt(2)))
            .await
            .response
            .status(),
        200
    );
    assert_eq!(
        agent
            .handle(signed("someone-else", &attempt(3)))
            .await
            .response
            .status(),
        401
    );

    let current_only = Agent::builder("rotated")
        .secret(NEW)
        .base_url("http://127.0.0.1:9")
        .handler(|_: Value| async { Ok::<_, HandlerError>(()) })
        .build()
        .unwrap();
    assert_eq!(
        current_only
            .handle(signed(OLD, PAYLOAD))
            .await
            .response
            .status(),
        401,
        "once the previous secret is dropped, it is refused"
    );
}

/// A webhook endpoint whose agent can be replaced, as a deploy replaces a function's code.
#[derive(Clone)]
struct Deployment(Arc<RwLock<Agent>>);

impl Deployment {
    async fn serve(agent: Agent) -> (Self, String) {
        let deployment = Self(Arc::new(RwLock::new(agent)));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/webhook", listener.local_addr().unwrap());
        let current = deployment.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let current = current.clone();
                let service = hyper::service::service_fn(
                    move |request: http::Request<hyper::body::Incoming>| {
                        let agent = current.0.read().unwrap().clone();
                        async move { Ok::<_, Infallible>(agent.fetch(request).await) }
                    },
                );
                tokio::spawn(async move {
                    auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await
                });
            }
        });
        (deployment, url)
    }

    fn replace(&self, agent: Agent) {
        *self.0.write().unwrap() = agent;
    }
}

/// The agent with its handler: a step, a wait on `gate`, another step.
fn build(
    kernel: &DevKernel,
    secret: &str,
    previous: Option<&str>,
    ran_first: &Arc<AtomicUsize>,
    gate: tokio::sync::watch::Receiver<bool>,
) -> Agent {
    let mut builder = Agent::builder("keeper")
        .secret(secret)
        .base_url(kernel.url());
    if let Some(previous) = previous {
        builder = builder.previous_secret(previous);
    }
    builder
        .handler_with_state(
            (Arc::clone(ran_first), gate),
            |(ran_first, mut gate), _: Value| async move {
                let first: u64 = step("first", || async {
                    ran_first.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, HandlerError>(1)
                })
                .await?;
                let _ = gate.wait_for(|open| *open).await;
                let second: u64 = step("second", || async { Ok::<_, HandlerError>(2) }).await?;
                Ok::<_, HandlerError>(json!([first, second]))
            },
        )
        .build()
        .unwrap()
}

/// The kernel rotates while two executions run on the old deployment (agent secret `OLD`).
/// The old deployment's in-flight run keeps writing with the old secret, which the kernel still
/// accepts, and completes; the new deployment (secret `NEW`, `OLD` as previous) takes the other
/// execution's re-delivery and finishes it, replaying its first step; nothing runs twice.
#[tokio::test]
async fn a_secret_rotated_during_a_running_execution_loses_nothing() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.expect("kernel");
    let ran_first = Arc::new(AtomicUsize::new(0));
    let (hold, held) = tokio::sync::watch::channel(false);
    let old = build(&kernel, OLD, None, &ran_first, held);
    let (deployment, url) = Deployment::serve(old.clone()).await;
    kernel
        .register_agent(AgentSpec::new("keeper", &url, OLD))
        .expect("register");
    let mut running = Vec::new();
    for _ in 0..2 {
        let created = kernel
            .create_execution(NewExecution::new("keeper", json!({})))
            .await
            .expect("create");
        running.push(created.id);
    }
    let (stays, moves) = (running[0].clone(), running[1].clone());
    // Both first steps recorded (not just run: a re-delivery before the record would run the
    // step again, rightly).
    let recorded = |id| kernel.events(id).iter().any(|e| e.kind == "step.succeeded");
    for _ in 0..500 {
        if recorded(&stays) && recorded(&moves) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        recorded(&stays) && recorded(&moves),
        "both first steps recorded"
    );
    assert_eq!(ran_first.load(Ordering::SeqCst), 2, "both first steps ran");

    kernel.rotate_secret("keeper", NEW).expect("rotate");
    let (_open, opened) = tokio::sync::watch::channel(true);
    let new = build(&kernel, NEW, Some(OLD), &ran_first, opened);
    deployment.replace(new.clone());

    kernel
        .redeliver(&moves)
        .expect("re-deliver to the new deployment");
    let moved = kernel.wait_terminal(&moves, WAIT).await.expect("ends");
    assert_eq!(
        moved.status,
        ExecutionStatus::Completed,
        "{}",
        moved.failure_reason
    );
    assert_eq!(moved.output, Some(json!([1, 2])));

    // The old deployment finishes what it holds, signing with the old secret.
    hold.send(true).expect("release the old deployment's runs");
    let stayed = kernel.wait_terminal(&stays, WAIT).await.expect("ends");
    assert_eq!(
        stayed.status,
        ExecutionStatus::Completed,
        "{}",
        stayed.failure_reason
    );
    assert_eq!(stayed.output, Some(json!([1, 2])));
    assert_eq!(
        ran_first.load(Ordering::SeqCst),
        2,
        "no first step ran twice"
    );

    let fresh = run(&kernel, "keeper", json!({})).await;
    assert_eq!(
        fresh.status,
        ExecutionStatus::Completed,
        "{}",
        fresh.failure_reason
    );
    kernel.retire_previous_secret("keeper").expect("retire");
    let after = run(&kernel, "keeper", json!({})).await;
    assert_eq!(
        after.status,
        ExecutionStatus::Completed,
        "{}",
        after.failure_reason
    );
    old.close().await;
    new.close().await;
}

/// Captured log output.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Every log line of a run (at TRACE, agent and dev kernel alike), every `Debug` and every
/// error text a user can see, with a refused webhook and a rotation in the run: none shows a
/// secret.
#[tokio::test(flavor = "current_thread")]
async fn no_secret_reaches_a_debug_a_log_line_or_an_error() {
    let captured = Captured::default();
    let sink = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || sink.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let kernel = DevKernel::start().await.expect("kernel");
    let builder = Agent::builder("keeper")
        .secret(OLD)
        .previous_secret(NEW)
        .base_url(kernel.url());
    let mut seen = vec![format!("{builder:?}")];
    let agent = builder
        .handler(|_: Value| async {
            let n: u64 = step("one", || async { Ok::<_, HandlerError>(1) }).await?;
            Ok::<_, HandlerError>(n)
        })
        .build()
        .unwrap();
    seen.push(format!("{agent:?}"));
    let spec = AgentSpec::new("keeper", "http://127.0.0.1:9/webhook", OLD);
    seen.push(format!("{spec:?}"));
    let served = serve(agent.clone()).await;
    kernel
        .register_agent(AgentSpec::new("keeper", served.webhook_url(), OLD))
        .unwrap();
    let done = run(&kernel, "keeper", json!({})).await;
    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    seen.push(format!("{done:?}"));

    let forged = agent.handle(signed("wrong", PAYLOAD)).await;
    seen.push(format!("{forged:?}"));
    let body = http_body_util::BodyExt::collect(forged.response.into_body())
        .await
        .unwrap()
        .to_bytes();
    seen.push(String::from_utf8_lossy(&body).into_owned());
    kernel.rotate_secret("keeper", NEW).unwrap();
    seen.push(format!("{kernel:?}"));
    let refused = Agent::builder("keeper").secret("").build().unwrap_err();
    seen.push(format!("{refused} {refused:?}"));
    served.shutdown().await;

    let logs = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
    assert!(logs.contains("keeper"), "the logs were captured: {logs}");
    seen.push(logs);
    for text in &seen {
        for secret in [OLD, NEW] {
            assert!(!text.contains(secret), "a secret leaked into: {text}");
        }
    }
}
