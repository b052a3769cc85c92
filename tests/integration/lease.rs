//! Lease fencing from the agent's side: a run whose dispatch was handed to another process
//! stops at its next write without failing the execution; close() refuses new dispatches and
//! join() waits for the runs in flight.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;
use rebuno::wire::ExecutionStatus;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rebuno::{Agent, HandlerError, step};
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::{Value, json};
use support::*;
use tokio::sync::watch;

/// An agent whose handler records "before", waits for `gate`, then records "after".
fn gated(kernel: &DevKernel, gate: watch::Receiver<bool>, afters: Arc<AtomicUsize>) -> Agent {
    gated_by(agent(kernel, "gated"), gate, afters)
}

/// [`gated`] from `builder` (another id or kernel URL).
pub(crate) fn gated_by(
    builder: rebuno::AgentBuilder,
    gate: watch::Receiver<bool>,
    afters: Arc<AtomicUsize>,
) -> Agent {
    builder
        .handler_with_state((gate, afters), |(mut gate, afters), _: Value| async move {
            step("before", || async { Ok::<_, HandlerError>(1) }).await?;
            let _ = gate.wait_for(|open| *open).await;
            step("after", || async {
                afters.fetch_add(1, Ordering::SeqCst);
                Ok::<_, HandlerError>(2)
            })
            .await?;
            Ok::<_, HandlerError>("done")
        })
        .build()
        .expect("agent config")
}

#[tokio::test]
async fn a_superseded_run_stops_at_its_next_write_without_failing_the_execution() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.expect("kernel");
    let afters = Arc::new(AtomicUsize::new(0));
    let (open_first, first_gate) = watch::channel(false);
    let (open_second, second_gate) = watch::channel(false);
    let first = serve(gated(&kernel, first_gate, Arc::clone(&afters))).await;
    kernel
        .register_agent(AgentSpec::new("gated", first.webhook_url(), SECRET))
        .expect("register");
    let created = kernel
        .create_execution(NewExecution::new("gated", json!({})))
        .await
        .expect("create");
    wait_for(&kernel, &created.id, "step.succeeded", 1).await;

    // The lease is reclaimed and the dispatch goes to a second process.
    let second = serve(gated(&kernel, second_gate, Arc::clone(&afters))).await;
    kernel
        .register_agent(AgentSpec::new("gated", second.webhook_url(), SECRET))
        .expect("re-register");
    kernel.redeliver(&created.id).expect("redeliver");
    wait_for(&kernel, &created.id, "dispatch.acked", 2).await;

    open_first.send(true).expect("open first");
    first.shutdown().await; // waits until the first run has ended
    assert_eq!(
        afters.load(Ordering::SeqCst),
        0,
        "the superseded run did not run its next step"
    );
    assert_eq!(
        kernel.execution(&created.id).unwrap().status,
        ExecutionStatus::Running,
        "and did not fail the execution"
    );

    open_second.send(true).expect("open second");
    let done = kernel.wait_terminal(&created.id, WAIT).await.expect("ends");
    assert_eq!(done.output, Some(json!("done")));
    assert_eq!(afters.load(Ordering::SeqCst), 1);
    second.shutdown().await;
}

#[tokio::test]
async fn close_refuses_new_dispatches_and_join_waits_for_runs_in_flight() {
    let _trace = trace_init();
    let kernel = DevKernel::builder()
        .retry_backoff(Duration::from_millis(50), Duration::from_millis(100))
        .start()
        .await
        .expect("kernel");
    let (open, gate) = watch::channel(false);
    let agent = gated(&kernel, gate, Arc::new(AtomicUsize::new(0)));
    let served = serve(agent.clone()).await;
    kernel
        .register_agent(AgentSpec::new("gated", served.webhook_url(), SECRET))
        .expect("register");
    let running = kernel
        .create_execution(NewExecution::new("gated", json!({})))
        .await
        .expect("create");
    wait_for(&kernel, &running.id, "step.succeeded", 1).await;
    assert_eq!(agent.in_flight(), 1);

    let closing = tokio::spawn({
        let agent = agent.clone();
        async move { agent.close().await }
    });
    let refused = kernel
        .create_execution(NewExecution::new("gated", json!({})))
        .await
        .expect("create");
    wait_for(&kernel, &refused.id, "dispatch.failed", 1).await;
    assert!(!closing.is_finished(), "close waits for the run in flight");

    open.send(true).expect("open");
    closing.await.expect("closed");
    assert_eq!(agent.in_flight(), 0);
    assert_eq!(
        kernel.execution(&running.id).unwrap().status,
        ExecutionStatus::Completed
    );
    served.shutdown().await;
}

async fn wait_for(kernel: &DevKernel, id: &str, kind: &str, count: usize) {
    for _ in 0..400 {
        if kernel.events(id).iter().filter(|e| e.kind == kind).count() >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "fewer than {count} {kind} events in {:?}",
        types(&kernel.events(id))
    );
}

#[tokio::test]
async fn a_redelivery_to_the_same_process_while_a_step_runs_supersedes_the_old_run() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.expect("kernel");
    // What the first attempt's `slow` step returned, if the run got that far.
    let old_outcome = Arc::new(Mutex::new(None::<Result<i32, rebuno::ErrorKind>>));
    let seen = Arc::clone(&old_outcome);
    let agent = agent(&kernel, "racer")
        .handler_with_state(seen, |seen, _: Value| async move {
            let attempt = rebuno::execution()?.dispatch_attempt();
            step("before", || async { Ok::<_, HandlerError>(1) }).await?;
            let slow = step("slow", move || async move {
                if attempt == 1 {
                    tokio::time::sleep(Duration::from_millis(400)).await;
                }
                Ok::<_, HandlerError>(2)
            })
            .await;
            if attempt == 1 {
                *seen.lock().unwrap() = Some(slow.as_ref().map(|n| *n).map_err(|e| e.kind()));
            }
            slow?;
            Ok::<_, HandlerError>(json!({ "attempt": attempt }))
        })
        .build()
        .expect("agent config");
    let served = serve(agent).await;
    kernel
        .register_agent(AgentSpec::new("racer", served.webhook_url(), SECRET))
        .expect("register");
    let created = kernel
        .create_execution(NewExecution::new("racer", json!({})))
        .await
        .expect("create");
    wait_for(&kernel, &created.id, "step.executing", 2).await;

    kernel.redeliver(&created.id).expect("redeliver");
    let done = kernel
        .wait_terminal(&created.id, WAIT)
        .await
        .expect("the second delivery finishes");

    assert_eq!(done.status, ExecutionStatus::Completed);
    assert_eq!(done.output, Some(json!({ "attempt": 2 })));
    let succeeded = || {
        let events = kernel.events(&created.id);
        events.iter().filter(|e| e.kind == "step.succeeded").count()
    };
    assert_eq!(succeeded(), 2, "each step settled once");

    // Past the old attempt's 400 ms step: it was cancelled, or told it was superseded, and
    // recorded nothing more.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let old = *old_outcome.lock().unwrap();
    assert!(
        matches!(old, None | Some(Err(rebuno::ErrorKind::LeaseSuperseded))),
        "the superseded attempt's step returned {old:?}"
    );
    assert_eq!(succeeded(), 2, "the old attempt wrote nothing after");
    served.shutdown().await;
}
