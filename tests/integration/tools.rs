//! Tools in depth: wrap_tool's seams, at_most_once after a crash, the context inside a tool,
//! calls outside a dispatch, and re-deliveries that repeat or supersede a running attempt.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rebuno::{ErrorKind, HandlerError, Idempotency, define_tool, execution, wrap_tool};
use rebuno_devkernel::NewExecution;
use serde_json::{Value, json};
use support::*;

#[tokio::test]
async fn wrap_tool_records_transformed_args_and_mapped_results() {
    let _trace = trace_init();
    let (kernel, served) = kernel_with("wrapped", |agent| {
        let search = wrap_tool("docs_search")
            .description("Search the docs")
            .transform_args(strip_nulls)
            .to_result(|raw| raw["hits"].clone())
            .invoke(|args: Value| async move {
                Ok::<_, HandlerError>(json!({ "hits": [args["q"]], "took_ms": 3 }))
            })
            .into_dyn();
        agent.handler_with_state(search, |search, _: Value| async move {
            Ok::<_, HandlerError>(
                search
                    .call_json(json!({ "q": "lease", "limit": null }))
                    .await?,
            )
        })
    })
    .await;

    let done = run(&kernel, "wrapped", json!({})).await;

    assert_eq!(done.output, Some(json!(["lease"])));
    let steps = kernel.steps(&done.id);
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].target, "docs_search");
    assert_eq!(
        serde_json::to_value(&steps[0]).unwrap()["args"],
        json!({ "q": "lease" }),
        "nulls stripped before recording"
    );
    assert_eq!(
        serde_json::to_value(&steps[0]).unwrap()["result"],
        json!(["lease"])
    );
    served.shutdown().await;
}

fn strip_nulls(args: Value) -> Value {
    match args {
        Value::Object(map) => {
            Value::Object(map.into_iter().filter(|(_, v)| !v.is_null()).collect())
        }
        other => other,
    }
}

#[tokio::test]
async fn tools_see_their_execution_and_refuse_to_run_outside_one() {
    let _trace = trace_init();
    let whoami = define_tool("whoami").execute(|_: Value| async {
        let context = execution()?;
        Ok::<_, HandlerError>(json!([
            context.id(),
            context.agent_id(),
            context.dispatch_attempt(),
            context.input()
        ]))
    });
    let outside = whoami.call(json!({})).await.unwrap_err();
    assert_eq!(outside.kind(), ErrorKind::Context);
    assert!(
        outside.to_string().contains("outside an active execution"),
        "{outside}"
    );

    let (kernel, served) = kernel_with("introspective", move |agent| {
        agent.handler_with_state(whoami, |whoami, _: Value| async move {
            Ok::<_, HandlerError>(whoami.call(json!({})).await?)
        })
    })
    .await;
    let done = run(&kernel, "introspective", json!({ "x": 1 })).await;
    assert_eq!(
        done.output,
        Some(json!([done.id.to_string(), "introspective", 1, { "x": 1 }]))
    );
    served.shutdown().await;
}

#[tokio::test]
async fn an_interrupted_at_most_once_call_comes_back_indeterminate() {
    let _trace = trace_init();
    let charges = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&charges);
    let (kernel, served) = kernel_with("billing", move |agent| {
        let charge = define_tool("charge_card")
            .idempotency(Idempotency::AtMostOnce)
            .execute(move |_: Value| {
                let first = counter.fetch_add(1, Ordering::SeqCst) == 0;
                async move {
                    if first {
                        std::future::pending::<()>().await; // the process "dies" mid-call
                    }
                    Ok::<_, HandlerError>("charged".to_owned())
                }
            });
        agent.handler_with_state(charge, |charge, _: Value| async move {
            match charge.call(json!({ "amount": 5 })).await {
                Ok(receipt) => Ok::<_, HandlerError>(json!(receipt)),
                Err(error) if error.kind() == ErrorKind::Tool => {
                    Ok(json!({ "reconcile": error.to_string() }))
                }
                Err(error) => Err(error.into()),
            }
        })
    })
    .await;
    let created = kernel
        .create_execution(NewExecution::new("billing", json!({})))
        .await
        .expect("create");
    wait_for_event(&kernel, &created.id, "step.executing").await;

    kernel.redeliver(&created.id).expect("redeliver");
    let done = kernel.wait_terminal(&created.id, WAIT).await.expect("ends");

    assert_eq!(charges.load(Ordering::SeqCst), 1, "never charged twice");
    let reconcile = done
        .output
        .as_ref()
        .and_then(|o| o["reconcile"].as_str())
        .unwrap_or_default()
        .to_owned();
    assert!(
        reconcile.starts_with("charge_card: outcome unknown"),
        "{done:?}"
    );
    let failed = kernel
        .events(&created.id)
        .into_iter()
        .find(|e| e.kind == "step.failed")
        .expect("step.failed");
    assert_eq!(failed.payload["target"], "charge_card");
    assert_eq!(
        serde_json::to_value(&kernel.steps(&created.id)[0]).unwrap()["error"]["reason"],
        "indeterminate"
    );
    served.shutdown().await;
}

#[tokio::test]
async fn a_newer_attempt_supersedes_the_running_one_and_repeats_are_ignored() {
    let _trace = trace_init();
    let starts = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicUsize::new(0));
    let (s, d) = (Arc::clone(&starts), Arc::clone(&dropped));
    let (kernel, served) = kernel_with("slowpoke", move |agent| {
        let work = define_tool("work").execute(move |_: Value| {
            let first = s.fetch_add(1, Ordering::SeqCst) == 0;
            let guard = DropCounter(Arc::clone(&d));
            async move {
                if first {
                    std::future::pending::<()>().await;
                }
                drop(guard);
                Ok::<_, HandlerError>("done".to_owned())
            }
        });
        agent.handler_with_state(work, |work, _: Value| async move {
            Ok::<_, HandlerError>(work.call(json!({})).await?)
        })
    })
    .await;
    let created = kernel
        .create_execution(NewExecution::new("slowpoke", json!({})))
        .await
        .expect("create");
    wait_for_event(&kernel, &created.id, "step.executing").await;

    let acked = kernel
        .events(&created.id)
        .into_iter()
        .find(|e| e.kind == "dispatch.acked")
        .expect("acked");
    let repeat = json!({ "execution_id": created.id.to_string(), "dispatch_id": acked.payload["dispatch_id"], "dispatch_attempt": 1, "lease_timeout_seconds": 120 }).to_string();
    let signature = rebuno::signing::sign_webhook(&rebuno::Secret::new(SECRET), repeat.as_bytes());
    let response = reqwest::Client::new()
        .post(served.webhook_url())
        .header("Rebuno-Signature", signature)
        .body(repeat)
        .send()
        .await
        .expect("repeat");
    assert_eq!(response.status(), 200);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(
        starts.load(Ordering::SeqCst),
        1,
        "a repeat of the running attempt starts nothing"
    );

    kernel.redeliver(&created.id).expect("redeliver");
    let done = kernel.wait_terminal(&created.id, WAIT).await.expect("ends");

    assert_eq!(done.output, Some(json!("done")));
    assert_eq!(
        starts.load(Ordering::SeqCst),
        2,
        "the safe_to_retry orphan ran again under attempt 2"
    );
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        2,
        "attempt 1's body was dropped, not left running"
    );
    served.shutdown().await;
}

struct DropCounter(Arc<AtomicUsize>);

impl Drop for DropCounter {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

async fn wait_for_event(kernel: &rebuno_devkernel::DevKernel, id: &str, kind: &str) {
    for _ in 0..400 {
        if kernel.events(id).iter().any(|e| e.kind == kind) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("no {kind} event in {:?}", types(&kernel.events(id)));
}
