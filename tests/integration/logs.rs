//! What a run logs on a native host, over real HTTP with the dev kernel: a kernel the agent
//! cannot reach is named at the first failure (not after the retries) and again when the run
//! gives up; a run that yields at its host's deadline says so, at info, with nothing at warn or
//! error; a run's outcome (completed, failed with its reason). The same lines reach the Workers
//! console (tests/workers/test.mjs checks them in workerd).

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use rebuno::wire::ExecutionStatus;
use std::time::{Duration, Instant};

use rebuno::{Agent, HandlerError, step};
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::{Value, json};

use crate::support::logs::Logs;
use crate::support::{SECRET, WAIT, agent, serve, serve_as_host};

/// Waits (up to `within`) until a captured line contains every one of `needles`.
async fn logged(logs: &Logs, within: Duration, needles: &[&str]) -> String {
    let until = Instant::now() + within;
    loop {
        if let Some(line) = logs
            .text()
            .lines()
            .find(|line| needles.iter().all(|needle| line.contains(needle)))
        {
            return line.to_owned();
        }
        assert!(
            Instant::now() < until,
            "no line with {needles:?} within {within:?} in:\n{}",
            logs.text()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn echo(agent: rebuno::AgentBuilder) -> Agent {
    agent
        .handler(|input: Value| async move { Ok::<_, HandlerError>(input) })
        .build()
        .unwrap()
}

/// A loopback URL nobody listens on: a port bound, then closed.
fn closed_url() -> String {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", closed.local_addr().unwrap())
}

#[tokio::test(flavor = "current_thread")]
async fn an_unreachable_kernel_is_named_at_the_first_failure_and_when_the_run_gives_up() {
    let (logs, _guard) = Logs::capture(tracing::Level::INFO);
    let kernel = DevKernel::start().await.unwrap();
    // The agent's REBUNO_URL is wrong: the kernel delivers, the agent cannot call it back.
    let wrong = closed_url();
    let served = serve(echo(Agent::builder("lost").secret(SECRET).base_url(&wrong))).await;
    kernel
        .register_agent(AgentSpec::new("lost", served.webhook_url(), SECRET))
        .unwrap();
    let created = kernel
        .create_execution(NewExecution::new("lost", json!("hi")))
        .await
        .unwrap();

    // At once (the retries take about 8 s): the URL, and the setting to check.
    let first = logged(&logs, Duration::from_secs(2), &["WARN", &wrong]).await;
    assert!(
        first.contains("REBUNO_URL") && first.contains("retrying"),
        "{first}"
    );
    // When the run gives up: the same, at error, and what happens next.
    let last = logged(&logs, Duration::from_secs(15), &["ERROR", &wrong]).await;
    assert!(
        last.contains("could not fetch the execution")
            && last.contains("REBUNO_URL")
            && last.contains("re-deliver"),
        "{last}"
    );
    println!("{first}\n{last}"); // with --nocapture: the lines a user sees
    let warned = logs.lines_with(" WARN ");
    assert_eq!(
        warned.len(),
        1,
        "one warn line per request: {}",
        logs.text()
    );
    kernel.cancel(&created.id).unwrap();
    served.shutdown().await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_deadline_yield_is_logged_as_a_yield_then_the_outcome() {
    let (logs, _guard) = Logs::capture(tracing::Level::INFO);
    let kernel = DevKernel::start().await.unwrap();
    let agent = agent(&kernel, "stopwatch")
        .handler(|_: Value| async move {
            step("fetch", || async { Ok::<_, HandlerError>(1) }).await?;
            tokio::time::sleep(Duration::from_millis(1000)).await; // slow work between steps
            step("store", || async { Ok::<_, HandlerError>(2) }).await?;
            Ok::<_, HandlerError>("stored")
        })
        .build()
        .unwrap();
    // The first delivery may run for 800 ms (100 ms margin): `store` falls past it.
    let url = serve_as_host(agent, Some(Duration::from_millis(800)))
        .await
        .url;
    kernel
        .register_agent(AgentSpec::new("stopwatch", url, SECRET).lease_timeout_seconds(30))
        .unwrap();
    let created = kernel
        .create_execution(NewExecution::new("stopwatch", json!({})))
        .await
        .unwrap();

    let id = created.id.to_string();
    let yielded = logged(&logs, Duration::from_secs(5), &["yielded", &id]).await;
    assert!(
        yielded.contains(" INFO ")
            && yielded.contains("time limit")
            && yielded.contains("next delivery")
            && yielded.contains("lease runs out (lease_timeout_seconds: 30)"),
        "{yielded}"
    );
    println!("{yielded}"); // with --nocapture
    kernel.redeliver(&created.id).unwrap();
    let done = kernel.wait_terminal(&created.id, WAIT).await.unwrap();
    assert_eq!(done.output, Some(json!("stored")));
    logged(
        &logs,
        Duration::from_secs(5),
        &[" INFO ", "execution completed", &id],
    )
    .await;
    let text = logs.text();
    assert!(
        !text.contains(" WARN ") && !text.contains(" ERROR "),
        "a yield is no failure: {text}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_failed_run_is_logged_with_its_reason() {
    let (logs, _guard) = Logs::capture(tracing::Level::INFO);
    let kernel = DevKernel::start().await.unwrap();
    let served = serve(
        agent(&kernel, "grumpy")
            .handler(|_: Value| async move {
                Err::<Value, _>(HandlerError::from("the moon is not made of cheese"))
            })
            .build()
            .unwrap(),
    )
    .await;
    kernel
        .register_agent(AgentSpec::new("grumpy", served.webhook_url(), SECRET))
        .unwrap();
    let done = crate::support::run(&kernel, "grumpy", json!({})).await;
    assert_eq!(done.status, ExecutionStatus::Failed);
    let id = done.id.to_string();
    let line = logged(&logs, Duration::from_secs(5), &["execution failed", &id]).await;
    println!("{line}"); // with --nocapture
    assert!(
        line.contains(" WARN ") && line.contains("the moon is not made of cheese"),
        "{line}"
    );
    served.shutdown().await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_stop_at_the_executions_own_deadline_says_the_kernel_cancels_it() {
    let (logs, _guard) = Logs::capture(tracing::Level::INFO);
    let kernel = DevKernel::builder()
        .execution_deadline(Duration::from_secs(7))
        .start()
        .await
        .unwrap();
    // `fetch` starts before the 5 s margin of the 7 s deadline and ends inside it.
    let served = serve(
        agent(&kernel, "slowpoke")
            .handler(|_: Value| async move {
                step("fetch", || async {
                    tokio::time::sleep(Duration::from_millis(2500)).await;
                    Ok::<_, HandlerError>(1)
                })
                .await?;
                step("store", || async { Ok::<_, HandlerError>(2) }).await?;
                Ok::<_, HandlerError>("stored")
            })
            .build()
            .unwrap(),
    )
    .await;
    kernel
        .register_agent(AgentSpec::new("slowpoke", served.webhook_url(), SECRET))
        .unwrap();
    let created = kernel
        .create_execution(NewExecution::new("slowpoke", json!({})))
        .await
        .unwrap();
    let id = created.id.to_string();
    let stopped = logged(&logs, Duration::from_secs(5), &["deadline_at", &id]).await;
    println!("{stopped}"); // with --nocapture
    assert!(
        stopped.contains(" INFO ")
            && stopped.contains("the execution's own deadline")
            && stopped.contains("cancels the execution")
            && !stopped.contains("yielded"),
        "{stopped}"
    );
    let done = kernel.wait_terminal(&created.id, WAIT).await.unwrap();
    assert_eq!(done.failure_reason, "deadline_exceeded");
    served.shutdown().await;
}
