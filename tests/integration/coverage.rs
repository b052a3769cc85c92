//! Fork coverage at every event of a short run: each fork restores exactly what the seed's rules
//! say (the newest covering checkpoint, else the newest earlier one, else the initial
//! environment), and copied results replay even where the restored state lacks their changes.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;

use rebuno::client::Client;
use rebuno::resource::{Checkpoints, resource};
use rebuno::wire::Event;
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

/// Writes a, b, c with a checkpoint every two writes, reading between b and c. Returns the
/// notebook as restored at the start and as it ends.
async fn start(kernel: &DevKernel, shelf: Shelf) -> Served {
    let agent = agent(kernel, "scribe")
        .handler_with_state(shelf, |shelf, _: Value| async move {
            let notebook = resource("notebook", shelf, Checkpoints::every(2)).await?;
            let restored = notebook.lines();
            let write = {
                let notebook = notebook.clone();
                define_tool("write")
                    .resources(["notebook"])
                    .execute(move |line: Line| {
                        let notebook = notebook.clone();
                        async move {
                            notebook.0.lock().unwrap().push(line.text);
                            Ok::<_, HandlerError>(())
                        }
                    })
            };
            write.call(Line { text: "a".into() }).await?;
            write.call(Line { text: "b".into() }).await?;
            let _: usize = step("count", || async {
                Ok::<_, HandlerError>(notebook.lines().len())
            })
            .await?;
            write.call(Line { text: "c".into() }).await?;
            Ok::<_, HandlerError>(json!({ "restored": restored, "final": notebook.lines() }))
        })
        .build()
        .expect("agent config");
    let served = serve(agent).await;
    kernel
        .register_agent(AgentSpec::new("scribe", served.webhook_url(), SECRET))
        .expect("register");
    served
}

/// What the rules say a fork at `seq` restores: `(checkpoint_ref, covered)`, or `None` when the
/// resource was not registered yet.
fn expected(events: &[Event], seq: u64) -> Option<(Option<String>, bool)> {
    let registered = events
        .iter()
        .find(|e| e.kind == "resource.registered")?
        .event_seq;
    if seq < registered {
        return None;
    }
    let newest = events
        .iter()
        .filter(|e| {
            e.kind == "resource.checkpointed"
                && e.payload["covered_seq"].as_u64().is_some_and(|c| c <= seq)
        })
        .max_by_key(|e| e.payload["covered_seq"].as_u64());
    let Some(newest) = newest else {
        return Some((None, false));
    };
    let since = newest.payload["covered_seq"].as_u64().unwrap_or(0);
    let invalidated = events.iter().any(|e| {
        e.kind == "step.executing"
            && (since + 1..=seq).contains(&e.event_seq)
            && e.payload["resources"]
                .as_array()
                .is_some_and(|keys| keys.iter().any(|k| k == "notebook"))
    });
    Some((
        newest.payload["checkpoint_ref"].as_str().map(str::to_owned),
        !invalidated,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fork_point_restores_what_the_coverage_rules_say() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.expect("kernel");
    let shelf = Shelf::default();
    let served = start(&kernel, shelf.clone()).await;
    let source = run(&kernel, "scribe", json!({})).await;
    assert_eq!(
        source.output,
        Some(json!({ "restored": [], "final": ["a", "b", "c"] }))
    );
    let events = kernel.events(&source.id);
    let client = Client::builder().base_url(kernel.url()).build().unwrap();
    let mut covered_forks = 0;

    for seq in 1..=events.len() as u64 {
        let fork = client
            .fork(source.id.to_string(), seq)
            .send()
            .await
            .unwrap_or_else(|e| panic!("fork at {seq}: {e}"));
        let restoration = fork
            .restoration
            .as_ref()
            .and_then(|r| r.get("notebook"))
            .cloned();
        let done = client.wait(&fork.id, WAIT).await.expect("fork ends");
        assert_eq!(
            done.status,
            rebuno::wire::ExecutionStatus::Completed,
            "fork at {seq}: {}",
            done.failure_reason
        );
        let output = done.output.clone().unwrap_or(Value::Null);

        let snapshot: Vec<String> = match expected(&events, seq) {
            None => {
                assert!(
                    restoration.is_none(),
                    "fork at {seq} (before registration) restored {restoration:?}"
                );
                Vec::new()
            }
            Some((reference, covered)) => {
                let restoration =
                    restoration.unwrap_or_else(|| panic!("fork at {seq} has no restoration"));
                assert_eq!(
                    restoration["checkpoint_ref"].as_str(),
                    reference.as_deref(),
                    "fork at {seq}"
                );
                assert_eq!(restoration["covered"], covered, "fork at {seq}");
                covered_forks += usize::from(covered);
                reference
                    .map(|r| shelf.snapshots.lock().unwrap()[&r].clone())
                    .unwrap_or_default()
            }
        };
        assert_eq!(
            output["restored"],
            json!(snapshot),
            "fork at {seq} started from the checkpoint's state"
        );
        // Writes settled at the fork point replay without running; the rest run live on top of
        // the restored state, which may lack the replayed writes' changes.
        let settled = events
            .iter()
            .filter(|e| {
                e.kind == "step.succeeded" && e.payload["target"] == "write" && e.event_seq <= seq
            })
            .count();
        let live = ["a", "b", "c"][settled..].iter().map(|t| (*t).to_owned());
        let want: Vec<String> = snapshot.iter().cloned().chain(live).collect();
        assert_eq!(output["final"], json!(want), "fork at {seq}");
    }
    assert!(covered_forks > 0, "some fork points are covered");
    served.shutdown().await;
}

/// Whether a fork right after the undeclared `count` step is covered.
async fn covered_after_count(reuse: bool) -> bool {
    let kernel = DevKernel::start().await.expect("kernel");
    let served = start(
        &kernel,
        Shelf {
            reuse,
            ..Shelf::default()
        },
    )
    .await;
    let source = run(&kernel, "scribe", json!({})).await;
    let events = kernel.events(&source.id);
    let count = events
        .iter()
        .find(|e| e.kind == "step.succeeded" && e.payload["target"] == "count")
        .expect("count step")
        .event_seq;
    let client = Client::builder().base_url(kernel.url()).build().unwrap();
    let fork = client
        .fork(source.id.to_string(), count)
        .send()
        .await
        .expect("fork");
    client.wait(&fork.id, WAIT).await.expect("fork ends");
    served.shutdown().await;
    fork.restoration.expect("restoration")["notebook"]["covered"] == true
}

#[tokio::test]
async fn coverage_reuse_keeps_coverage_across_steps_that_do_not_touch_the_resource() {
    let _trace = trace_init();
    assert!(
        !covered_after_count(false).await,
        "by default coverage ends at the next live step"
    );
    assert!(
        covered_after_count(true).await,
        "with coverage_reuse it lasts until an affecting step starts"
    );
}
