//! A host deadline (Lambda's invocation deadline, Workers' waitUntil limit) makes the run yield
//! before its next step without failing the execution; the re-delivery replays what was
//! recorded and finishes, with nothing run twice.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rebuno::{HandlerError, step};
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::{Value, json};
use support::*;

#[tokio::test]
async fn a_run_near_its_deadline_yields_and_the_redelivery_finishes_it() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.expect("kernel");
    let (first, second) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (f, s) = (Arc::clone(&first), Arc::clone(&second));
    let agent = agent(&kernel, "stopwatch")
        .handler_with_state((f, s), |(f, s), _: Value| async move {
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
        })
        .build()
        .expect("agent config");
    let url = serve_as_host(agent, Some(Duration::from_millis(800)))
        .await
        .url;
    kernel
        .register_agent(AgentSpec::new("stopwatch", url, SECRET))
        .expect("register");

    let created = kernel
        .create_execution(NewExecution::new("stopwatch", json!({})))
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
