//! An SDK agent served over HTTP runs real executions against the dev kernel.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;
use rebuno::wire::ExecutionStatus;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rebuno::{HandlerError, define_tool, step};
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::*;

#[derive(Serialize, Deserialize)]
struct Search {
    query: String,
}

#[derive(Deserialize)]
struct Input {
    topic: String,
}

#[tokio::test]
async fn two_tool_calls_and_a_step_complete_with_events_in_order() {
    let _trace = trace_init();
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let (kernel, served) = kernel_with("researcher", move |agent| {
        let search = define_tool("search").execute(move |args: Search| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, HandlerError>(vec![format!("{} result", args.query)]) }
        });
        agent.handler_with_state(search, |search, input: Input| async move {
            let first = search
                .call(Search {
                    query: input.topic.clone(),
                })
                .await?;
            let second = search
                .call(Search {
                    query: format!("{} history", input.topic),
                })
                .await?;
            let stamp: u64 = step("stamp", || async { Ok::<_, HandlerError>(42) }).await?;
            let hits = [first, second].concat();
            Ok::<_, HandlerError>(json!({ "hits": hits, "stamp": stamp }))
        })
    })
    .await;

    let done = run(&kernel, "researcher", json!({ "topic": "rust" })).await;

    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "failure: {}",
        done.failure_reason
    );
    assert_eq!(
        done.output,
        Some(json!({ "hits": ["rust result", "rust history result"], "stamp": 42 }))
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    let events = kernel.events(&done.id);
    let steps: Vec<_> = types(&events)
        .into_iter()
        .filter(|t| t.starts_with("step."))
        .collect();
    let one_step = [
        "step.proposed",
        "step.allowed",
        "step.executing",
        "step.succeeded",
    ];
    assert_eq!(steps, [one_step, one_step, one_step].concat());
    let types = types(&events);
    assert_eq!(
        &types[..3],
        ["execution.created", "execution.started", "dispatch.queued"]
    );
    assert_eq!(
        types.last().map(String::as_str),
        Some("execution.completed")
    );
    let targets: Vec<_> = events
        .iter()
        .filter(|e| e.kind == "step.succeeded")
        .map(|e| (e.payload["step_type"].clone(), e.payload["target"].clone()))
        .collect();
    assert_eq!(
        targets,
        [
            (json!("tool_call"), json!("search")),
            (json!("tool_call"), json!("search")),
            (json!("local"), json!("stamp"))
        ]
    );
    let seqs: Vec<u64> = events.iter().map(|e| e.event_seq).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    served.shutdown().await;
}

#[tokio::test]
async fn an_input_that_does_not_fit_fails_with_input_invalid() {
    let _trace = trace_init();
    let (kernel, served) = kernel_with("strict", |agent| {
        agent.handler(|input: Input| async move { Ok::<_, HandlerError>(input.topic) })
    })
    .await;

    let done = run(&kernel, "strict", json!({ "subject": "rust" })).await;

    assert_eq!(done.status, ExecutionStatus::Failed);
    assert!(
        done.failure_reason.starts_with("input_invalid: "),
        "{}",
        done.failure_reason
    );
    assert!(
        done.failure_reason.contains("topic"),
        "{}",
        done.failure_reason
    );
    served.shutdown().await;
}

#[tokio::test]
async fn a_failing_tool_fails_the_step_and_the_execution_with_tool_error() {
    let _trace = trace_init();
    let (kernel, served) = kernel_with("broken", |agent| {
        let fetch = define_tool("fetch_page")
            .execute(|_: Search| async { Err::<String, _>("connection reset") });
        agent.handler_with_state(fetch, |fetch, input: Input| async move {
            Ok::<_, HandlerError>(fetch.call(Search { query: input.topic }).await?)
        })
    })
    .await;

    let done = run(&kernel, "broken", json!({ "topic": "x" })).await;

    assert_eq!(done.status, ExecutionStatus::Failed);
    assert_eq!(
        done.failure_reason,
        "tool_error: fetch_page: connection reset"
    );
    let events = kernel.events(&done.id);
    let failed = events
        .iter()
        .find(|e| e.kind == "step.failed")
        .expect("step.failed event");
    assert_eq!(failed.payload["target"], "fetch_page");
    let steps = kernel.steps(&done.id);
    assert_eq!(
        steps[0].error,
        Some(json!({ "message": "connection reset" }))
    );
    served.shutdown().await;
}

#[tokio::test]
async fn a_client_wait_that_runs_out_of_time_is_a_timeout() {
    let _trace = trace_init();
    let (release, released) = tokio::sync::watch::channel(false);
    let (kernel, served) = kernel_with("sleeper", move |agent| {
        agent.handler_with_state(released, |mut released, _: serde_json::Value| async move {
            let _ = released.wait_for(|go| *go).await;
            Ok::<_, HandlerError>("awake")
        })
    })
    .await;
    let client = rebuno::client::Client::builder()
        .base_url(kernel.url())
        .build()
        .expect("client");
    let created = client
        .create("sleeper")
        .input(json!({}))
        .send()
        .await
        .expect("create");

    let error = client
        .wait(&created.id, std::time::Duration::from_millis(200))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), rebuno::ErrorKind::Timeout, "{error}");

    release.send(true).expect("release");
    let done = client.wait(&created.id, WAIT).await.expect("ends");
    assert_eq!(done.status, rebuno::wire::ExecutionStatus::Completed);
    assert_eq!(done.output, Some(json!("awake")));
    served.shutdown().await;
}

/// `CreateExecution::run`: a durable agent called like a function, its output typed; a failure
/// or a cancellation is an `ExecutionFailed` error with the reason; a run still going when the
/// wait ends is a `Timeout` that names it.
#[tokio::test]
async fn run_creates_waits_and_returns_the_typed_output_or_why_there_is_none() {
    use rebuno::ErrorKind;
    use rebuno::client::Client;
    use std::time::Duration;
    let _trace = trace_init();
    let (kernel, served) = kernel_with("counter", |agent| {
        agent.handler(|input: serde_json::Value| async move {
            match input["words"].as_str() {
                Some("slow") => {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    Ok(0)
                }
                Some(words) => Ok(words.split_whitespace().count()),
                None => Err(HandlerError::from("no words to count")),
            }
        })
    })
    .await;
    let client = Client::builder().base_url(kernel.url()).build().unwrap();

    let counted: usize = client
        .create("counter")
        .input(json!({ "words": "durable agents on every host" }))
        .run(WAIT)
        .await
        .unwrap();
    assert_eq!(counted, 5);

    let failed = client
        .create("counter")
        .input(json!({}))
        .run::<usize>(WAIT)
        .await
        .unwrap_err();
    assert_eq!(failed.kind(), ErrorKind::ExecutionFailed);
    assert!(
        failed
            .reason()
            .unwrap_or_default()
            .contains("no words to count"),
        "{failed}"
    );

    let unfitting = client
        .create("counter")
        .input(json!({ "words": "one" }))
        .run::<String>(WAIT)
        .await
        .unwrap_err();
    assert_eq!(unfitting.kind(), ErrorKind::Serde, "{unfitting}");

    let waiting = client
        .create("counter")
        .input(json!({ "words": "slow" }))
        .run::<usize>(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert_eq!(waiting.kind(), ErrorKind::Timeout);
    let going = client
        .list()
        .agent_id("counter")
        .send()
        .await
        .unwrap()
        .executions
        .into_iter()
        .find(|e| !e.status.is_terminal())
        .expect("the slow execution goes on");
    assert!(waiting.to_string().contains(&going.id), "{waiting}");

    // Cancelled while `run` waits on it.
    client.cancel(&going.id).await.unwrap();
    let slow = client
        .create("counter")
        .input(json!({ "words": "slow" }))
        .idempotency_key("slow-2");
    let waiter = tokio::spawn(slow.run::<usize>(WAIT));
    let second = loop {
        let page = client.list().agent_id("counter").send().await.unwrap();
        if let Some(found) = page
            .executions
            .into_iter()
            .find(|e| e.idempotency_key.as_deref() == Some("slow-2"))
        {
            break found;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    client.cancel(&second.id).await.unwrap();
    let cancelled = waiter.await.unwrap().unwrap_err();
    assert_eq!(cancelled.kind(), ErrorKind::ExecutionFailed);
    assert!(cancelled.to_string().contains("cancelled"), "{cancelled}");
    served.shutdown().await;
    kernel.shutdown().await;
}

/// `Fork::policy_bundle`: the fork of a finished execution runs again under another policy, so
/// a tool the original called is denied in the fork (and the original keeps its result).
#[tokio::test]
async fn a_fork_under_another_policy_bundle_is_decided_by_it() {
    use rebuno::client::Client;
    let _trace = trace_init();
    let (kernel, served) = kernel_with("publisher", |agent| {
        let publish = define_tool("publish").execute(|text: String| async move {
            Ok::<_, HandlerError>(format!("published {text}"))
        });
        agent.handler(move |text: String| {
            let publish = publish.clone();
            async move {
                match publish.call(text).await {
                    Ok(done) => Ok::<_, HandlerError>(json!({ "published": done })),
                    Err(error) if error.kind() == rebuno::ErrorKind::Policy => {
                        Ok(json!({ "denied": error.reason() }))
                    }
                    Err(error) => Err(error.into()),
                }
            }
        })
    })
    .await;
    let client = Client::builder().base_url(kernel.url()).build().unwrap();
    let original = client
        .create("publisher")
        .input(json!("the post"))
        .send()
        .await
        .unwrap();
    let original = client.wait(&original.id, WAIT).await.unwrap();
    assert_eq!(
        original.output,
        Some(json!({ "published": "published the post" }))
    );
    let started = kernel
        .events(&original.id)
        .iter()
        .position(|e| e.kind == "execution.started")
        .unwrap() as u64
        + 1;
    let strict = "default_action: allow\nrules:\n  - id: no-publishing\n    when: { target: publish }\n    then: { decision: deny, reason: frozen }\n";
    let fork = client
        .fork(original.id.clone(), started)
        .policy_bundle(strict)
        .send()
        .await
        .unwrap();
    let fork = client.wait(&fork.id, WAIT).await.unwrap();
    assert_eq!(fork.output, Some(json!({ "denied": "frozen" })), "{fork:?}");
    let again = client.get(&original.id).await.unwrap();
    assert_eq!(again.output, original.output, "the original is untouched");
    served.shutdown().await;
    kernel.shutdown().await;
}

/// A handler that creates executions through the client, re-delivered after it did: the
/// default idempotency key (the execution, the agent, the input and the occurrence) gives the
/// re-delivery the executions the first delivery created, not duplicates; two identical
/// creations in one delivery are still two executions, and an explicit key still rules.
#[tokio::test]
async fn creations_inside_a_run_are_idempotent_across_redeliveries() {
    use rebuno::client::Client;
    use rebuno_devkernel::{AgentSpec, DevKernel, ExecutionExt, NewExecution};
    use std::time::Duration;
    let _trace = trace_init();
    let kernel = DevKernel::start().await.expect("kernel");
    let url = kernel.url();
    let worker = agent(&kernel, "worker")
        .handler(|n: u32| async move { Ok::<_, HandlerError>(n * 2) })
        .build()
        .unwrap();
    let launcher = agent(&kernel, "launcher")
        .handler(move |_: serde_json::Value| {
            let url = url.clone();
            async move {
                let client = Client::builder().base_url(url).build()?;
                let mut ids = Vec::new();
                for _ in 0..2 {
                    ids.push(client.create("worker").input(json!(21)).send().await?.id);
                }
                let keyed = client
                    .create("worker")
                    .input(json!(21))
                    .idempotency_key("mine")
                    .send()
                    .await?
                    .id;
                ids.push(keyed);
                if rebuno::execution()?.dispatch_attempt() == 1 {
                    std::future::pending::<()>().await; // cut off after creating
                }
                Ok::<_, HandlerError>(ids)
            }
        })
        .build()
        .unwrap();
    let (worker_served, launcher_served) = (serve(worker).await, serve(launcher).await);
    for (id, served) in [("worker", &worker_served), ("launcher", &launcher_served)] {
        kernel
            .register_agent(AgentSpec::new(id, served.webhook_url(), SECRET))
            .unwrap();
    }
    let created = kernel
        .create_execution(NewExecution::new("launcher", json!({})))
        .await
        .unwrap();
    let client = Client::builder().base_url(kernel.url()).build().unwrap();
    let workers = || async {
        client
            .list()
            .agent_id("worker")
            .send()
            .await
            .unwrap()
            .executions
    };
    while workers().await.len() < 3 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    kernel.redeliver(&created.id).unwrap();
    let done = kernel.wait_terminal(&created.id, WAIT).await.unwrap();
    let ids: Vec<String> = done.output_as().unwrap();
    assert_eq!(ids.len(), 3);
    let mut distinct = ids.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        3,
        "two identical creations are two executions: {ids:?}"
    );
    let all = workers().await;
    assert_eq!(
        all.len(),
        3,
        "the re-delivery created nothing new: {all:#?}"
    );
    assert!(all.iter().all(|w| ids.contains(&w.id)));
    for served in [worker_served, launcher_served] {
        served.shutdown().await;
    }
    kernel.shutdown().await;
}
