//! The acknowledged run's life in one process: a host that drops it unfinished leaves nothing
//! behind, an attempt delivered twice runs once, and a panic fails the execution at once.

use crate::support;
use rebuno::wire::ExecutionStatus;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rebuno::signing::sign_webhook;
use rebuno::{HandlerError, Idempotency, define_tool, step};
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use support::*;

const PAYLOAD: &str = r#"{"execution_id":"0192f1a0-0000-7000-8000-000000000000","dispatch_id":"01920000-0000-7000-8000-000000000001","dispatch_attempt":1,"lease_timeout_seconds":120}"#;

fn webhook(body: &str) -> http::Request<rebuno::Body> {
    http::Request::post("/webhook")
        .header(
            "Rebuno-Signature",
            sign_webhook(&rebuno::Secret::new(SECRET), body.as_bytes()),
        )
        .body(rebuno::Body::from(body.to_owned()))
        .unwrap()
}

/// An agent whose kernel is unreachable: its runs never get past fetching the execution.
fn offline_agent() -> rebuno::Agent {
    rebuno::Agent::builder("offline")
        .secret(SECRET)
        .base_url("http://127.0.0.1:9")
        .handler(|_: Value| async { Ok::<_, HandlerError>(()) })
        .build()
        .unwrap()
}

/// A host that cuts a run (a `waitUntil` limit, a drain timeout) drops its `Task`: the agent
/// must forget it, or `join` and `close` wait forever and the entry leaks.
#[tokio::test]
async fn a_dropped_background_run_is_forgotten() {
    let agent = offline_agent();
    let dispatch = agent.handle(webhook(PAYLOAD)).await;
    assert_eq!(dispatch.response.status(), 200);
    let run = dispatch.background.expect("a run to keep alive");
    assert_eq!(agent.in_flight(), 1);

    drop(run);
    assert_eq!(agent.in_flight(), 0, "a dropped run is no longer in flight");
    tokio::time::timeout(Duration::from_secs(1), agent.join())
        .await
        .expect("join returns once the dropped run is forgotten");

    let newer = PAYLOAD.replace("\"dispatch_attempt\":1", "\"dispatch_attempt\":2");
    let next = agent.handle(webhook(&newer)).await;
    assert!(next.background.is_some(), "the next attempt runs");
    drop(next);
    tokio::time::timeout(Duration::from_secs(1), agent.close())
        .await
        .expect("close returns");
}

/// Dropping a run that was never polled forgets it too, and a thousand of them leak nothing.
#[tokio::test]
async fn dropped_runs_leave_no_entries_behind() {
    let agent = offline_agent();
    for attempt in 1..=1000 {
        let body = PAYLOAD.replace(
            "\"dispatch_attempt\":1",
            &format!("\"dispatch_attempt\":{attempt}"),
        );
        let dispatch = agent.handle(webhook(&body)).await;
        assert!(dispatch.background.is_some(), "attempt {attempt} runs");
    }
    assert_eq!(agent.in_flight(), 0);
}

#[derive(Serialize, Deserialize)]
struct Charge {
    cents: u64,
}

/// The same attempt reaching this process again after its run ended (a load balancer retrying
/// a delivery, a duplicate arriving late) is acknowledged and not run: otherwise its calls get
/// fresh occurrence numbers and an `at_most_once` tool runs a second time.
#[tokio::test]
async fn an_attempt_delivered_again_after_its_run_ended_does_not_run_twice() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.expect("kernel");
    let charged = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&charged);
    let charge = define_tool("charge")
        .idempotency(Idempotency::AtMostOnce)
        .execute(move |args: Charge| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, HandlerError>(args.cents) }
        });
    let agent = agent(&kernel, "biller")
        .handler_with_state(charge, |charge, _: Value| async move {
            let cents = charge.call(Charge { cents: 500 }).await?;
            tokio::time::sleep(Duration::from_millis(600)).await; // past the first deadline
            let receipt = step("receipt", || async {
                Ok::<_, HandlerError>("r-1".to_owned())
            })
            .await?;
            Ok::<_, HandlerError>(json!({ "cents": cents, "receipt": receipt }))
        })
        .build()
        .expect("agent config");
    let host = serve_as_host(agent.clone(), Some(Duration::from_millis(400))).await;
    kernel
        .register_agent(AgentSpec::new("biller", &host.url, SECRET))
        .expect("register");
    let created = kernel
        .create_execution(NewExecution::new("biller", json!({})))
        .await
        .expect("create");

    // The first run charges, then yields at its deadline; its lease is still live.
    wait_for(|| charged.load(Ordering::SeqCst) == 1).await;
    wait_for(|| agent.in_flight() == 0).await;
    let first = host.deliveries().remove(0);
    assert_eq!(host.deliver_again(&first).await, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(agent.in_flight(), 0, "the repeat started no run");
    assert_eq!(
        charged.load(Ordering::SeqCst),
        1,
        "the repeat charged nothing"
    );

    kernel.redeliver(&created.id).expect("next attempt");
    let done = kernel.wait_terminal(&created.id, WAIT).await.expect("ends");
    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    assert_eq!(done.output, Some(json!({ "cents": 500, "receipt": "r-1" })));
    assert_eq!(charged.load(Ordering::SeqCst), 1, "charged exactly once");
    let charges = kernel
        .steps(&created.id)
        .into_iter()
        .filter(|s| s.target == "charge")
        .count();
    assert_eq!(charges, 1, "one charge step on the kernel");
}

/// A panic in the handler (here in a tool body) fails the execution at once with the panic's
/// message, instead of leaving each attempt to wait out its lease.
#[tokio::test]
async fn a_panicking_handler_fails_the_execution_at_once_with_its_message() {
    let _trace = trace_init();
    let (kernel, served) = kernel_with("fragile", |agent| {
        let explode = define_tool("explode").execute(|_: Value| async move {
            if true {
                panic!("the flux capacitor cracked");
            }
            Ok::<_, HandlerError>(())
        });
        agent.handler_with_state(explode, |explode, _: Value| async move {
            explode.call(json!({})).await?;
            Ok::<_, HandlerError>(())
        })
    })
    .await;
    let created = kernel
        .create_execution(NewExecution::new("fragile", json!({})))
        .await
        .expect("create");
    // The default lease is 120 s: an execution that waited on it would not end in time.
    let done = kernel
        .wait_terminal(&created.id, Duration::from_secs(10))
        .await
        .expect("the execution ends well within one lease");
    assert_eq!(done.status, ExecutionStatus::Failed);
    assert!(
        done.failure_reason.starts_with("agent_error: ")
            && done
                .failure_reason
                .contains("handler panicked: the flux capacitor cracked"),
        "{}",
        done.failure_reason
    );
    let acks = types(&kernel.events(&created.id))
        .iter()
        .filter(|t| *t == "dispatch.acked")
        .count();
    assert_eq!(acks, 1, "one attempt, no re-delivery");
    served.shutdown().await;
}

async fn wait_for(condition: impl Fn() -> bool) {
    for _ in 0..500 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition not met within 5 s");
}

/// A kernel transport that delivers the first step submit and then loses its answer, as a
/// connection cut mid-response does.
#[derive(Debug)]
struct LosesFirstSubmitAnswer {
    inner: rebuno::transport::ReqwestTransport,
    lost: Arc<AtomicUsize>,
}

impl rebuno::transport::Transport for LosesFirstSubmitAnswer {
    fn send(
        &self,
        request: http::Request<bytes::Bytes>,
        timeout: Duration,
    ) -> rebuno::transport::TransportFuture {
        let submit =
            request.method() == http::Method::POST && request.uri().path().ends_with("/steps");
        let sent = self.inner.send(request, timeout);
        let lost = Arc::clone(&self.lost);
        Box::pin(async move {
            let answer = sent.await;
            if submit && lost.fetch_add(1, Ordering::SeqCst) == 0 {
                return Err(rebuno::transport::TransportError::new(
                    rebuno::transport::TransportErrorKind::Timeout,
                    "answer lost on the way back",
                ));
            }
            answer
        })
    }
}

/// A step submit whose answer is lost has an unknown outcome and is not resent; the run ends
/// without failing the execution, and the next attempt submits it afresh and completes it,
/// running the tool once.
#[tokio::test]
async fn a_lost_submit_answer_ends_the_dispatch_instead_of_failing_the_execution() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.expect("kernel");
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&ran);
    let lost = Arc::new(AtomicUsize::new(0));
    // Safe to retry: an at-most-once tool would come back `indeterminate` instead, since the
    // kernel cannot know whether the first attempt ran it.
    let charge = define_tool("charge").execute(move |args: Charge| {
        counter.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, HandlerError>(args.cents) }
    });
    let agent = rebuno::Agent::builder("cut")
        .secret(SECRET)
        .base_url(kernel.url())
        .transport(LosesFirstSubmitAnswer {
            inner: rebuno::transport::ReqwestTransport::new().unwrap(),
            lost: Arc::clone(&lost),
        })
        .handler_with_state(charge, |charge, _: Value| async move {
            Ok::<_, HandlerError>(charge.call(Charge { cents: 7 }).await?)
        })
        .build()
        .unwrap();
    let served = serve(agent.clone()).await;
    kernel
        .register_agent(AgentSpec::new("cut", served.webhook_url(), SECRET))
        .expect("register");
    let created = kernel
        .create_execution(NewExecution::new("cut", json!({})))
        .await
        .expect("create");
    wait_for(|| lost.load(Ordering::SeqCst) == 1).await;
    wait_for(|| agent.in_flight() == 0).await;
    assert_eq!(
        kernel.execution(&created.id).unwrap().status,
        ExecutionStatus::Running,
        "not failed: the kernel re-delivers"
    );
    kernel.redeliver(&created.id).expect("next attempt");
    let done = kernel.wait_terminal(&created.id, WAIT).await.expect("ends");
    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    assert_eq!(done.output, Some(json!(7)));
    assert_eq!(ran.load(Ordering::SeqCst), 1, "the tool ran once");
    served.shutdown().await;
}
