//! A host deadline (Lambda's invocation deadline, Workers' waitUntil limit) makes the run yield
//! before its next step without failing the execution; the re-delivery replays what was
//! recorded and finishes, with nothing run twice.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rebuno::rt::{Clock, Deadline, SystemClock};
use rebuno::{Agent, HandlerError, step};
use rebuno_devkernel::{AgentSpec, CreateExecution, DevKernel};
use serde_json::{Value, json};
use support::*;

/// Serves `agent` like a host whose first invocation may only run for `first_budget`.
async fn serve_with_deadline(agent: Agent, first_budget: Duration) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/webhook", listener.local_addr().unwrap());
    let invocations = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let (agent, invocations) = (agent.clone(), Arc::clone(&invocations));
            let service = hyper::service::service_fn(
                move |mut request: http::Request<hyper::body::Incoming>| {
                    let agent = agent.clone();
                    if invocations.fetch_add(1, Ordering::SeqCst) == 0 {
                        let budget = u64::try_from(first_budget.as_millis()).unwrap();
                        let deadline =
                            Deadline::at_unix_millis(SystemClock::default().unix_millis() + budget)
                                .margin(Duration::from_millis(100));
                        request.extensions_mut().insert(deadline);
                    }
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
    url
}

#[tokio::test]
async fn a_run_near_its_deadline_yields_and_the_redelivery_finishes_it() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.expect("kernel");
    let (first, second) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let agent = agent(&kernel, "stopwatch");
    let (f, s) = (Arc::clone(&first), Arc::clone(&second));
    agent.bind(move |_: Value| {
        let (f, s) = (Arc::clone(&f), Arc::clone(&s));
        async move {
            step("fetch", || async {
                Ok::<_, HandlerError>(f.fetch_add(1, Ordering::SeqCst))
            })
            .await?;
            tokio::time::sleep(Duration::from_millis(1000)).await; // slow work between steps
            step("store", || async {
                Ok::<_, HandlerError>(s.fetch_add(1, Ordering::SeqCst))
            })
            .await?;
            Ok::<_, HandlerError>("stored")
        }
    });
    let url = serve_with_deadline(agent, Duration::from_millis(800)).await;
    kernel
        .register_agent(AgentSpec::new("stopwatch", url, SECRET))
        .expect("register");

    let created = kernel
        .create_execution(CreateExecution::new("stopwatch", json!({})))
        .await
        .expect("create");
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let midway = kernel.execution(created.id).expect("exists");
    assert_eq!(
        midway.status.as_str(),
        "running",
        "yielding does not fail the execution"
    );
    assert_eq!(
        (first.load(Ordering::SeqCst), second.load(Ordering::SeqCst)),
        (1, 0),
        "the second step was not started"
    );

    kernel.redeliver(created.id).expect("lease expiry");
    let done = kernel.wait_terminal(created.id, WAIT).await.expect("ends");

    assert_eq!(done.output, Some(json!("stored")));
    assert_eq!(
        (first.load(Ordering::SeqCst), second.load(Ordering::SeqCst)),
        (1, 1),
        "nothing ran twice"
    );
    let acked = kernel
        .events(created.id)
        .into_iter()
        .filter(|e| e.kind == "dispatch.acked")
        .count();
    assert_eq!(acked, 2);
}
