//! Virtual time with a real SDK agent: on a manual clock the agent served by the dev kernel
//! waits on the kernel's clock, so heartbeats, leases and an hour-long approval all move with
//! `advance`, in milliseconds of wall time.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rebuno::transport::{HyperTransport, Transport, TransportFuture};
use rebuno::wire::ExecutionStatus;
use rebuno::{Agent, HandlerError, define_tool, step};
use rebuno_devkernel::{DevKernel, NewExecution};
use serde_json::{Value, json};
use tokio::sync::Notify;

const HOUR: Duration = Duration::from_secs(3600);

/// The SDK's own transport, counting heartbeats when their answer returns: on the test's
/// single-threaded runtime the agent then re-arms its next heartbeat's sleep in the same poll,
/// before the test sees the count and advances the clock again.
#[derive(Debug, Clone)]
struct CountingHeartbeats {
    inner: Arc<HyperTransport>,
    heartbeats: Arc<AtomicUsize>,
}

impl Transport for CountingHeartbeats {
    fn send(&self, request: http::Request<Bytes>, timeout: Duration) -> TransportFuture {
        let heartbeat = request.uri().path().ends_with("/heartbeat");
        let sent = self.inner.send(request, timeout);
        let heartbeats = Arc::clone(&self.heartbeats);
        Box::pin(async move {
            let answer = sent.await;
            if heartbeat && answer.is_ok() {
                heartbeats.fetch_add(1, Ordering::SeqCst);
            }
            answer
        })
    }
}

/// Waits (in real time, briefly) until `count` reaches `at_least`.
async fn until(count: &AtomicUsize, at_least: usize) {
    let limit = Instant::now() + Duration::from_secs(10);
    while count.load(Ordering::SeqCst) < at_least {
        assert!(
            Instant::now() < limit,
            "only {} of {at_least}",
            count.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test]
async fn heartbeats_follow_the_kernel_clock_and_keep_a_lease_for_two_virtual_minutes() {
    let wall = Instant::now();
    let kernel = DevKernel::builder()
        .manual_clock()
        .default_lease_timeout(Duration::from_secs(30)) // a heartbeat every 10 s
        .start()
        .await
        .unwrap();
    let heartbeats = Arc::new(AtomicUsize::new(0));
    let transport = CountingHeartbeats {
        inner: Arc::new(HyperTransport::new().unwrap()),
        heartbeats: Arc::clone(&heartbeats),
    };
    let release = Arc::new(Notify::new());
    let entered = Arc::new(Notify::new());
    let (held, started) = (Arc::clone(&release), Arc::clone(&entered));
    let agent = Agent::builder("long")
        .transport(transport)
        .handler(move |_: Value| {
            let (held, started) = (Arc::clone(&held), Arc::clone(&started));
            async move {
                step("long work", move || async move {
                    started.notify_one();
                    held.notified().await;
                    Ok::<_, HandlerError>("done".to_owned())
                })
                .await
                .map_err(HandlerError::from)
            }
        });
    let served = kernel.serve(agent).await.unwrap();
    let created = kernel
        .create_execution(NewExecution::new("long", json!({})))
        .await
        .unwrap();
    entered.notified().await;

    // Real time passes, virtual time does not: no heartbeat.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(heartbeats.load(Ordering::SeqCst), 0);

    // Two virtual minutes in 10 s strides: a heartbeat each, and the 30 s lease never lapses.
    for stride in 1..=12 {
        kernel.advance(Duration::from_secs(10)).unwrap();
        until(&heartbeats, stride).await;
    }
    let reclaimed = kernel
        .events(&created.id)
        .iter()
        .filter(|e| e.kind == "dispatch.reclaimed")
        .count();
    assert_eq!(reclaimed, 0, "the heartbeats kept the lease");

    release.notify_one();
    let done = kernel
        .wait_terminal(&created.id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.output, Some(json!("done")));
    served.shutdown().await;
    kernel.shutdown().await;
    eprintln!(
        "120 s of virtual time, 12 heartbeats, in {:?} of wall time",
        wall.elapsed()
    );
}

#[tokio::test]
async fn an_sdk_agent_waits_out_an_hour_long_approval_in_milliseconds() {
    let wall = Instant::now();
    let kernel = DevKernel::builder()
        .manual_clock()
        .approval_timeout(HOUR)
        .start()
        .await
        .unwrap();
    let deploy = define_tool("deploy")
        .execute(|env: String| async move { Ok::<_, HandlerError>(format!("deployed to {env}")) });
    let agent = Agent::builder("deployer").handler(move |env: String| {
        let deploy = deploy.clone();
        async move {
            Ok::<_, HandlerError>(match deploy.call(env).await {
                Ok(done) => done,
                Err(refused) => format!("not deployed: {refused}"),
            })
        }
    });
    let served = kernel.serve(agent).await.unwrap();
    kernel
        .set_policy(
            "deployer",
            "rules:\n  - id: gate\n    when: { target: deploy }\n    then: { decision: require_approval }\n",
        )
        .unwrap();
    let created = kernel
        .create_execution(NewExecution::new("deployer", json!("prod")))
        .await
        .unwrap();
    let blocked = |s: ExecutionStatus| s == ExecutionStatus::Blocked;
    kernel
        .wait_until(&created.id, Duration::from_secs(10), blocked)
        .await
        .unwrap();

    kernel.advance(HOUR - Duration::from_secs(1)).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        kernel.execution(&created.id).unwrap().status,
        ExecutionStatus::Blocked
    );
    assert!(
        kernel
            .approvals()
            .iter()
            .all(|a| a.status == rebuno::wire::ApprovalStatus::Pending)
    );

    kernel.advance(Duration::from_secs(1)).unwrap();
    let done = kernel
        .wait_terminal(&created.id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    let output = done.output.unwrap();
    assert!(
        output.as_str().unwrap().starts_with("not deployed"),
        "{output}"
    );
    assert!(
        output.as_str().unwrap().contains("approval_timeout"),
        "{output}"
    );
    assert!(
        kernel
            .approvals()
            .iter()
            .all(|a| a.status == rebuno::wire::ApprovalStatus::Expired)
    );
    served.shutdown().await;
    kernel.shutdown().await;
    eprintln!(
        "an hour-long approval expired in {:?} of wall time",
        wall.elapsed()
    );
}

#[tokio::test]
async fn an_sdk_agent_parked_by_a_rate_limit_resumes_when_the_clock_refills_the_bucket() {
    let kernel = DevKernel::builder().manual_clock().start().await.unwrap();
    let fetched = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&fetched);
    let fetch = define_tool("fetch").execute(move |n: u32| {
        counter.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, HandlerError>(n * 10) }
    });
    let agent = Agent::builder("fetcher").handler(move |_: Value| {
        let fetch = fetch.clone();
        async move { Ok::<_, HandlerError>(fetch.call(1).await? + fetch.call(2).await?) }
    });
    let served = kernel.serve(agent).await.unwrap();
    kernel
        .set_policy(
            "fetcher",
            "rules:\n  - id: slow\n    when: { target: fetch }\n    then: { decision: allow, rate_limit: { max_calls: 1, window: 1h, max_wait: 2h } }\n",
        )
        .unwrap();
    let created = kernel
        .create_execution(NewExecution::new("fetcher", json!({})))
        .await
        .unwrap();
    let wait = Duration::from_secs(10);
    kernel
        .wait_for_event(
            &created.id,
            rebuno_devkernel::EventKind::StepRateLimited,
            wait,
        )
        .await
        .unwrap();

    // Parked: one call made, the second waits for the bucket, not for real time.
    kernel.advance(Duration::from_secs(59 * 60)).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(fetched.load(Ordering::SeqCst), 1);
    assert_eq!(
        kernel.execution(&created.id).unwrap().status,
        ExecutionStatus::Running
    );

    // The park re-delivers after the wait for a token plus up to 25% jitter: by 75 minutes.
    kernel.advance(Duration::from_secs(16 * 60 + 1)).unwrap();
    let done = kernel.wait_terminal(&created.id, wait).await.unwrap();
    assert_eq!(done.output, Some(json!(30)));
    assert_eq!(fetched.load(Ordering::SeqCst), 2, "the first call replayed");
    served.shutdown().await;
    kernel.shutdown().await;
}
