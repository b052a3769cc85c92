//! A host deadline (Lambda's invocation deadline, Workers' waitUntil limit) makes the run yield
//! before its next step without failing the execution; the re-delivery replays what was
//! recorded and finishes, with nothing run twice.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;
use rebuno::wire::ExecutionStatus;

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
    let midway = kernel.execution(&created.id).expect("exists");
    assert_eq!(
        midway.status,
        ExecutionStatus::Running,
        "yielding does not fail the execution"
    );
    assert_eq!(
        (first.load(Ordering::SeqCst), second.load(Ordering::SeqCst)),
        (1, 0),
        "the second step was not started"
    );

    kernel.redeliver(&created.id).expect("lease expiry");
    let done = kernel.wait_terminal(&created.id, WAIT).await.expect("ends");

    assert_eq!(done.output, Some(json!("stored")));
    assert_eq!(
        (first.load(Ordering::SeqCst), second.load(Ordering::SeqCst)),
        (1, 1),
        "nothing ran twice"
    );
    let acked = kernel
        .events(&created.id)
        .into_iter()
        .filter(|e| e.kind == "dispatch.acked")
        .count();
    assert_eq!(acked, 2);
}

/// The execution's own deadline (`deadline_at`, set by a kernel with execution deadlines) stops
/// the run from starting a step within the margin of it, as the host's deadline does: the step
/// in flight finishes and is recorded, the next never starts, and the kernel cancels the
/// execution with `deadline_exceeded` when the deadline passes.
#[tokio::test]
async fn the_executions_own_deadline_stops_new_steps_before_the_kernel_cancels_it() {
    let _trace = trace_init();
    let kernel = DevKernel::builder()
        .execution_deadline(Duration::from_secs(7))
        .start()
        .await
        .expect("kernel");
    let stored = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(std::sync::Mutex::new(None::<String>));
    let (counter, deadline) = (Arc::clone(&stored), Arc::clone(&seen));
    let agent = agent(&kernel, "slowpoke")
        .handler_with_state(
            (counter, deadline),
            |(counter, deadline), _: Value| async move {
                *deadline.lock().unwrap() = rebuno::execution()?.deadline_at().map(str::to_owned);
                // Starts well before the margin (5 s) of the 7 s deadline, ends inside it.
                step("fetch", || async {
                    tokio::time::sleep(Duration::from_millis(2500)).await;
                    Ok::<_, HandlerError>(1)
                })
                .await?;
                step("store", || async {
                    Ok::<_, HandlerError>(counter.fetch_add(1, Ordering::SeqCst))
                })
                .await?;
                Ok::<_, HandlerError>("stored")
            },
        )
        .build()
        .expect("agent config");
    let served = serve(agent).await;
    kernel
        .register_agent(AgentSpec::new("slowpoke", served.webhook_url(), SECRET))
        .unwrap();
    let created = kernel
        .create_execution(NewExecution::new("slowpoke", json!({})))
        .await
        .unwrap();
    let deadline_at = created.deadline_at.expect("the kernel set a deadline");
    let done = kernel
        .wait_terminal(&created.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(done.status, rebuno::wire::ExecutionStatus::Cancelled);
    assert_eq!(done.failure_reason, "deadline_exceeded");
    assert_eq!(
        seen.lock().unwrap().as_deref(),
        Some(deadline_at.to_string().as_str()),
        "execution().deadline_at() is the kernel's"
    );
    assert_eq!(
        stored.load(Ordering::SeqCst),
        0,
        "no step started past the margin"
    );
    let steps: Vec<(String, String)> = kernel
        .steps(&created.id)
        .into_iter()
        .map(|s| (s.target, s.status))
        .collect();
    assert_eq!(
        steps,
        [("fetch".to_owned(), "succeeded".to_owned())],
        "the step in flight was recorded"
    );
    served.shutdown().await;
    kernel.shutdown().await;
}
