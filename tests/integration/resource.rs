//! Resources end to end: registration, binding, baseline and due checkpoints, reopening on
//! re-delivery, forks restoring the covered state, and an unavailable checkpoint.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;
use rebuno::wire::ExecutionStatus;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rebuno::client::Client;
use rebuno::resource::{Checkpoints, resource};
use rebuno::{HandlerError, define_tool, step};
use rebuno_devkernel::{AgentSpec, DevKernel};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use support::notebook::Shelf;
use support::*;

#[derive(Serialize, Deserialize)]
struct Line {
    text: String,
}

/// Serves `writer`: writes each input line with a tool declared on the notebook, then reads it.
async fn writer(kernel: &DevKernel, shelf: Shelf) -> Served {
    let agent = agent(kernel, "writer")
        .handler_with_state(shelf, |shelf, lines: Vec<String>| async move {
            let notebook = resource("notebook", shelf, Checkpoints::every(1)).await?;
            let write = {
                let notebook = notebook.clone();
                define_tool("write")
                    .resources(["notebook"])
                    .execute(move |line: Line| {
                        let notebook = notebook.clone();
                        async move {
                            notebook.0.lock().unwrap().push(line.text.clone());
                            Ok::<_, HandlerError>(format!("wrote {}", line.text))
                        }
                    })
            };
            for text in lines {
                write.call(Line { text }).await?;
            }
            let seen: Vec<String> =
                step("read", || async { Ok::<_, HandlerError>(notebook.lines()) }).await?;
            Ok::<_, HandlerError>(json!({ "seen": seen, "now": notebook.lines() }))
        })
        .build()
        .expect("agent config");
    let served = serve(agent).await;
    kernel
        .register_agent(AgentSpec::new("writer", served.webhook_url(), SECRET))
        .expect("register");
    served
}

#[tokio::test]
async fn checkpoints_follow_the_policy_and_a_fork_restores_the_covered_state() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.expect("kernel");
    let shelf = Shelf::default();
    let served = writer(&kernel, shelf.clone()).await;

    let done = run(&kernel, "writer", json!(["a", "b"])).await;

    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    assert_eq!(
        done.output,
        Some(json!({ "seen": ["a", "b"], "now": ["a", "b"] }))
    );
    let events = kernel.events(&done.id);
    let kinds = types(&events);
    let at = |kind: &str| {
        kinds
            .iter()
            .position(|k| k == kind)
            .unwrap_or_else(|| panic!("no {kind} in {kinds:?}"))
    };
    assert!(at("resource.registered") < at("resource.bound"));
    let checkpoints: Vec<_> = events
        .iter()
        .filter(|e| e.kind == "resource.checkpointed")
        .collect();
    // A baseline, one after each write, and one on completion: the `read` step is live, so
    // without coverage_reuse it ended the coverage of the last write's checkpoint.
    assert_eq!(checkpoints.len(), 4, "{kinds:?}");
    assert_eq!(
        at("resource.checkpointed"),
        at("resource.bound") + 1,
        "the baseline comes first"
    );
    assert_eq!(
        shelf.snapshots.lock().unwrap().get("snap-1"),
        Some(&vec!["a".to_owned()])
    );

    // Fork right after the first write settled: the fork's notebook is restored from snap-1.
    let first_write = events
        .iter()
        .find(|e| e.kind == "step.succeeded")
        .unwrap()
        .event_seq;
    let client = Client::builder().base_url(kernel.url()).build().unwrap();
    let fork = client
        .fork(done.id.to_string(), first_write)
        .send()
        .await
        .expect("fork");
    let restoration = fork
        .restoration
        .clone()
        .expect("restoration on the fork response");
    assert_eq!(restoration["notebook"]["covered"], true);
    let forked = client.wait(&fork.id, WAIT).await.expect("fork ends");

    assert_eq!(
        forked.output,
        Some(json!({ "seen": ["a", "b"], "now": ["a", "b"] })),
        "restored a, replayed nothing else"
    );
    assert_eq!(
        shelf.created.load(Ordering::SeqCst),
        2,
        "the fork created its own notebook"
    );
    served.shutdown().await;
}

#[tokio::test]
async fn a_redelivery_reopens_the_recorded_binding() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.expect("kernel");
    let shelf = Shelf::default();
    let (release, released) = tokio::sync::watch::channel(false);
    let calls = Arc::new(AtomicUsize::new(0));
    let agent = agent(&kernel, "keeper")
        .handler_with_state(
            (shelf.clone(), released, Arc::clone(&calls)),
            |(shelf, mut released, calls), _: Value| async move {
                let notebook = resource("notebook", shelf, Checkpoints::never()).await?;
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    let _ = released.wait_for(|go| *go).await; // the first dispatch hangs
                }
                Ok::<_, HandlerError>(notebook.lines().len())
            },
        )
        .build()
        .expect("agent config");
    let served = serve(agent).await;
    kernel
        .register_agent(AgentSpec::new("keeper", served.webhook_url(), SECRET))
        .unwrap();
    let created = kernel
        .create_execution(rebuno_devkernel::NewExecution::new("keeper", json!({})))
        .await
        .unwrap();
    kernel
        .wait_until(&created.id, WAIT, |_| true)
        .await
        .unwrap();
    for _ in 0..200 {
        if kernel
            .events(&created.id)
            .iter()
            .any(|e| e.kind == "resource.bound")
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }

    kernel.redeliver(&created.id).unwrap();
    let done = kernel.wait_terminal(&created.id, WAIT).await.unwrap();

    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    assert_eq!(
        (
            shelf.created.load(Ordering::SeqCst),
            shelf.opened.load(Ordering::SeqCst)
        ),
        (1, 1)
    );
    release.send(true).unwrap();
    served.shutdown().await;
}

#[tokio::test]
async fn a_fork_whose_checkpoint_is_gone_fails_with_an_agent_error_naming_it() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.expect("kernel");
    let shelf = Shelf::default();
    let served = writer(&kernel, shelf.clone()).await;
    let done = run(&kernel, "writer", json!(["a"])).await;
    let seq = kernel
        .events(&done.id)
        .iter()
        .find(|e| e.kind == "step.succeeded")
        .unwrap()
        .event_seq;

    shelf.snapshots.lock().unwrap().clear(); // the driver's storage expired
    let client = Client::builder().base_url(kernel.url()).build().unwrap();
    let fork = client
        .fork(done.id.to_string(), seq)
        .send()
        .await
        .expect("fork");
    let forked = client.wait(&fork.id, WAIT).await.expect("fork ends");

    assert_eq!(forked.status, rebuno::wire::ExecutionStatus::Failed);
    // The documented token set (PROTOCOL.md §4.5), as the Python SDK writes it.
    assert!(
        forked
            .failure_reason
            .starts_with("agent_error: CheckpointUnavailable: "),
        "{}",
        forked.failure_reason
    );
    let reason = forked.failure().expect("a failure reason");
    assert_eq!(reason.token, rebuno::wire::FailureToken::AgentError);
    served.shutdown().await;
}

/// A driver that fails one checkpoint and panics in another (the one on completion) loses
/// nothing: the execution completes with the fault-free output, each failure is recorded as
/// the resource's capture failure, and a fork at the uncovered point says so instead of
/// restoring a wrong state.
#[tokio::test]
async fn a_driver_failing_or_panicking_mid_checkpoint_loses_nothing() {
    use support::notebook::Fault;

    let _trace = trace_init();
    let kernel = DevKernel::start().await.expect("kernel");
    let shelf = Shelf::default();
    // Calls: 0 the baseline, 1 after writing "a", 2 after "b", 3 after the local `read` step,
    // 4 on completion.
    shelf
        .faults
        .lock()
        .unwrap()
        .extend([(1, Fault::Fail), (3, Fault::Panic), (4, Fault::Panic)]);
    let served = writer(&kernel, shelf.clone()).await;

    let done = run(&kernel, "writer", json!(["a", "b"])).await;

    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    assert_eq!(
        done.output,
        Some(json!({ "seen": ["a", "b"], "now": ["a", "b"] }))
    );
    assert_eq!(shelf.checkpoints.load(Ordering::SeqCst), 5);
    let events = kernel.events(&done.id);
    let kinds = types(&events);
    let failures: Vec<_> = events
        .iter()
        .filter(|e| e.kind == "resource.checkpoint_failed")
        .map(|e| e.payload["error"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(failures.len(), 3, "{kinds:?}");
    assert!(
        failures[0].contains("snapshot store unavailable"),
        "{failures:?}"
    );
    for panicked in &failures[1..] {
        assert!(
            panicked.contains("checkpoint panicked: snapshot driver bug"),
            "{failures:?}"
        );
    }

    let first_write = events
        .iter()
        .find(|e| e.kind == "step.succeeded")
        .unwrap()
        .event_seq;
    let client = Client::builder().base_url(kernel.url()).build().unwrap();
    let points = kernel.fork_points(&done.id).expect("fork points");
    let fork = client.fork(done.id.to_string(), first_write).send().await;
    let restoration = fork.expect("fork").restoration.expect("restoration");
    assert_eq!(restoration["notebook"]["covered"], false, "{points:?}");
    served.shutdown().await;
}

/// A driver that implements no `checkpoint`: enough with checkpoints off.
struct Plain;

impl rebuno::resource::ResourceDriver for Plain {
    type Handle = u32;
    type Binding = u32;

    fn driver_id(&self) -> String {
        "test.plain.v1".into()
    }

    async fn create(&self, _checkpoint: Option<&str>) -> Result<(u32, u32), rebuno::BoxError> {
        Ok((7, 7))
    }

    async fn open(&self, binding: u32) -> Result<u32, rebuno::BoxError> {
        Ok(binding)
    }
}

/// Runs one execution of an agent that opens a `Plain` resource under `checkpoints` and
/// returns the handle; the ended execution.
async fn plain_run(checkpoints: Checkpoints) -> rebuno::wire::Execution {
    let kernel = DevKernel::start().await.unwrap();
    let agent = agent(&kernel, "plain")
        .handler(move |(): ()| async move {
            Ok::<_, HandlerError>(resource("box", Plain, checkpoints).await?)
        })
        .build()
        .expect("agent config");
    let served = serve(agent).await;
    kernel
        .register_agent(AgentSpec::new("plain", served.webhook_url(), SECRET))
        .expect("register");
    let done = run(&kernel, "plain", Value::Null).await;
    served.shutdown().await;
    done
}

/// Checkpoints are off by default (the current Python and TypeScript docs), and a driver used
/// without them needs no `checkpoint`.
#[tokio::test]
async fn checkpoints_are_off_by_default_and_a_driver_without_checkpoint_works_then() {
    assert_eq!(Checkpoints::default(), Checkpoints::never());
    let done = plain_run(Checkpoints::default()).await;
    assert_eq!(done.output, Some(json!(7)), "{}", done.failure_reason);
}

/// `every(0)` is refused before anything reaches the kernel, with what to write instead; so is
/// checkpointing with a driver that cannot capture.
#[tokio::test]
async fn every_zero_and_checkpoints_without_a_checkpoint_method_fail_loudly() {
    let zero = plain_run(Checkpoints::every(0)).await;
    assert!(
        zero.failure_reason
            .contains("every_steps must be at least 1; use Checkpoints::never()"),
        "{}",
        zero.failure_reason
    );
    assert!(
        zero.failure_reason.starts_with("agent_error: Config: "),
        "{}",
        zero.failure_reason
    );
    let unable = plain_run(Checkpoints::every(1)).await;
    assert!(
        unable.failure_reason.contains(
            "driver \"test.plain.v1\" does not capture checkpoints: implement \
             ResourceDriver::checkpoint"
        ),
        "{}",
        unable.failure_reason
    );
}
