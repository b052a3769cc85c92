//! `rebuno-dev exec redeliver ID`: an SDK agent served over HTTP is held inside a step; the
//! command (the `rebuno-dev` binary, over HTTP) reclaims its dispatch as a lease expiry
//! would and the second delivery replays the recorded step and completes. Ended, unknown and
//! unauthenticated redeliveries are refused with what to do.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rebuno::wire::Event;
use rebuno::{Agent, HandlerError, Step};
use rebuno_devkernel::{DevKernel, NewExecution};

use crate::common::rebuno_dev;
use serde_json::json;

const TOKEN: &str = "bootstrap-token";

/// Counts of step bodies run: `recorded` (never held), `held` (held on its first run).
#[derive(Default)]
struct Runs {
    recorded: AtomicU32,
    held: AtomicU32,
}

/// Semaphores the runs of the held step wait on: the first run on `[0]`, the others on `[1]`.
type Gates = Arc<[tokio::sync::Semaphore; 2]>;

fn gates() -> Gates {
    Arc::new([(); 2].map(|()| tokio::sync::Semaphore::new(0)))
}

/// `input + 1` in a step, then twice that in a step whose runs wait for their gate.
fn holding_agent(runs: Arc<Runs>, hold: Gates) -> rebuno::AgentBuilder {
    Agent::builder("holding").handler(move |input: u32| {
        let (runs, hold) = (runs.clone(), hold.clone());
        async move {
            let counts = runs.clone();
            let first = Step::new("recorded")
                .run(|| async move {
                    counts.recorded.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, HandlerError>(input + 1)
                })
                .await?;
            Step::new("held")
                .run(|| async move {
                    let run = runs.held.fetch_add(1, Ordering::SeqCst);
                    hold[usize::from(run > 0)].acquire().await?.forget();
                    Ok::<_, HandlerError>(first * 2)
                })
                .await
        }
    })
}

fn dispatch_events(events: &[Event]) -> Vec<(String, serde_json::Value, serde_json::Value)> {
    events
        .iter()
        .filter(|e| e.kind.starts_with("dispatch."))
        .map(|e| {
            let error = e.payload.get("error").cloned().unwrap_or_default();
            (e.kind.clone(), e.payload["attempt"].clone(), error)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_redeliver_delivers_a_held_run_again_and_it_completes_by_replay() {
    let kernel = DevKernel::builder()
        .bearer_token(Some(TOKEN.to_owned()))
        .start()
        .await
        .unwrap();
    let url = kernel.url();
    let runs = Arc::new(Runs::default());
    let hold = gates();
    let served = kernel
        .serve(holding_agent(runs.clone(), hold.clone()))
        .await
        .unwrap();
    let id = kernel
        .create_execution(NewExecution::new("holding", json!(1)))
        .await
        .unwrap()
        .id
        .to_string();
    while runs.held.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // Without the token the kernel refuses, and the CLI says which option to set.
    let (code, _, err) = rebuno_dev(&["exec", "redeliver", &id, "--url", &url]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("401 unauthorized"), "{err}");
    assert!(
        err.trim_end().ends_with("set --token or REBUNO_API_KEY"),
        "{err}"
    );

    let words = ["--url", &url, "--token", TOKEN, "exec", "redeliver", &id];
    let (code, out, err) = rebuno_dev(&words).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with(&format!("{id} redelivered: dispatch ")),
        "{out}"
    );
    assert!(out.trim_end().ends_with(", attempt 2"), "{out}");

    // The second run is held until its delivery is recorded (the ack of a run that has
    // already completed would not be).
    let second_acked = |events: Vec<Event>| {
        events
            .iter()
            .any(|e| e.kind == "dispatch.acked" && e.payload["attempt"] == 2)
    };
    while !second_acked(kernel.events(&id)) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    hold[1].add_permits(1);
    let done = kernel
        .wait_terminal(&id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.output, Some(json!(4)));
    // The recorded step replayed; the held one ran again under the new attempt.
    assert_eq!(runs.recorded.load(Ordering::SeqCst), 1);
    assert_eq!(runs.held.load(Ordering::SeqCst), 2);
    hold[0].add_permits(1); // the superseded run goes on and is refused
    let dispatches = dispatch_events(&kernel.events(&id));
    assert_eq!(
        dispatches,
        [
            ("dispatch.queued".into(), json!(0), json!(null)),
            ("dispatch.acked".into(), json!(1), json!(null)),
            ("dispatch.reclaimed".into(), json!(1), json!("redelivered")),
            ("dispatch.acked".into(), json!(2), json!(null)),
        ]
    );
    let reclaimed = kernel
        .events(&id)
        .into_iter()
        .find(|e| e.kind == "dispatch.reclaimed")
        .unwrap();
    assert_eq!(reclaimed.payload["status"], "pending");

    // An ended execution has nothing to deliver again.
    let (code, _, err) = rebuno_dev(&words).await;
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "rebuno-dev: kernel answered 409 conflict: conflict: execution {id} has ended \
             (completed); only a running execution can be redelivered"
        )
    );
    let unknown = "0192f1a0-0000-7000-8000-000000000000";
    let words = [
        "--url",
        &url,
        "--token",
        TOKEN,
        "exec",
        "redeliver",
        unknown,
    ];
    let (code, _, err) = rebuno_dev(&words).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("404 not_found: not found: execution"), "{err}");
    served.shutdown().await;
    kernel.shutdown().await;
}

#[tokio::test]
async fn exec_redeliver_refuses_a_run_with_nothing_in_flight_or_on_its_last_attempt() {
    let kernel = DevKernel::builder().max_attempts(1).start().await.unwrap();
    let url = kernel.url();
    let runs = Arc::new(Runs::default());
    let hold = gates();
    let served = kernel
        .serve(holding_agent(runs.clone(), hold.clone()))
        .await
        .unwrap();
    let id = kernel
        .create_execution(NewExecution::new("holding", json!(1)))
        .await
        .unwrap()
        .id;
    while runs.held.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let text = id.to_string();
    let (code, _, err) = rebuno_dev(&["exec", "redeliver", &text, "--url", &url]).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "execution {id} is on attempt 1 of 1: a redelivery would fail it dispatch_exhausted; \
             serve rebuno-dev with more attempts (--dispatch-max-attempts"
        )),
        "{err}"
    );
    // Refused, not done: the run goes on and completes under its one attempt.
    hold[0].add_permits(1);
    let done = kernel
        .wait_terminal(&id, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(done.output, Some(json!(4)));
    assert!(
        kernel
            .events(&id)
            .iter()
            .all(|e| e.kind != "dispatch.reclaimed")
    );
    served.shutdown().await;
    kernel.shutdown().await;
}
