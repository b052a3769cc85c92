//! Edge cases of replay checking and crash testing found by an adversarial review: concurrent
//! and identical calls cut off mid-body, cancelled and kernel-failed histories, session turns
//! reading `previous()`, forks, and an `at_most_once` call beside a crashed one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rebuno::{Agent, AgentBuilder, HandlerError, Tool, define_tool, step};
use rebuno_devkernel::replay::{self, History, Verdict};
use rebuno_devkernel::{DevKernel, NewExecution, ServedAgent};
use serde_json::{Value, json};

/// Builds an agent whose tool bodies count their runs and hold while `hold` is set.
type Build = fn(Arc<AtomicBool>, Arc<AtomicUsize>) -> AgentBuilder;

/// A tool whose body counts its runs and holds while `hold` is set.
fn held_tool(
    name: &'static str,
    hold: &Arc<AtomicBool>,
    runs: &Arc<AtomicUsize>,
) -> Tool<u32, u32> {
    let (hold, runs) = (Arc::clone(hold), Arc::clone(runs));
    define_tool(name).execute(move |n: u32| {
        runs.fetch_add(1, Ordering::SeqCst);
        let hold = Arc::clone(&hold);
        async move {
            while hold.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok::<_, HandlerError>(n)
        }
    })
}

/// Two tools called concurrently (futures::join).
fn pair(hold: Arc<AtomicBool>, runs: Arc<AtomicUsize>) -> AgentBuilder {
    let (a, b) = (
        held_tool("tool_a", &hold, &runs),
        held_tool("tool_b", &hold, &runs),
    );
    Agent::builder("pair").handler(move |n: u32| {
        let (a, b) = (a.clone(), b.clone());
        async move {
            let (x, y) = futures_util::join!(a.call(n), b.call(n + 1));
            Ok::<_, HandlerError>(x? + y?)
        }
    })
}

/// The same tool called twice at once with the same args: occurrences 0 and 1.
fn twins(hold: Arc<AtomicBool>, runs: Arc<AtomicUsize>) -> AgentBuilder {
    let same = held_tool("same", &hold, &runs);
    Agent::builder("twins").handler(move |n: u32| {
        let same = same.clone();
        async move {
            let (x, y) = futures_util::join!(same.call(n), same.call(n));
            Ok::<_, HandlerError>(x? + y?)
        }
    })
}

/// An execution of `build`'s agent (input 1) held with both of its calls mid-body.
struct Held {
    build: Build,
    served: ServedAgent,
    id: String,
    hold: Arc<AtomicBool>,
    runs: Arc<AtomicUsize>,
}

async fn held(kernel: &DevKernel, build: Build, agent: &str) -> Held {
    let hold = Arc::new(AtomicBool::new(true));
    let runs = Arc::new(AtomicUsize::new(0));
    let served = kernel
        .serve(build(Arc::clone(&hold), Arc::clone(&runs)))
        .await
        .unwrap();
    let id = kernel
        .create_execution(NewExecution::new(agent, json!(1)))
        .await
        .unwrap()
        .id;
    while runs.load(Ordering::SeqCst) < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Held {
        build,
        served,
        id,
        hold,
        runs,
    }
}

impl Held {
    /// Checks `history` against the same code, with nothing held; no body may run.
    async fn check(&self, history: &History) -> replay::ReplayReport {
        let before = self.runs.load(Ordering::SeqCst);
        let free = Arc::new(AtomicBool::new(false));
        let report = replay::check((self.build)(free, Arc::clone(&self.runs)), history)
            .await
            .unwrap();
        assert_eq!(
            self.runs.load(Ordering::SeqCst),
            before,
            "a body ran in the check"
        );
        report
    }

    fn release(&self) {
        self.hold.store(false, Ordering::SeqCst);
    }
}

/// Two calls in flight at once, both cut off mid-body in a running execution: the same code
/// asks for both again (as the kernel would rerun them) and replays clean. With identical
/// calls the kernel numbers them occurrences 0 and 1, and so must the checker.
#[tokio::test]
async fn concurrent_unsettled_steps_replay_clean() {
    for (build, agent, output) in [(pair as Build, "pair", 3), (twins, "twins", 2)] {
        let kernel = DevKernel::start().await.unwrap();
        let run = held(&kernel, build, agent).await;
        let history = kernel.history(&run.id).unwrap();
        assert_eq!(history.steps().len(), 2);
        assert!(history.steps().iter().all(|s| s.status == "executing"));
        let report = run.check(&history).await;
        run.release();
        let done = kernel
            .wait_terminal(&run.id, Duration::from_secs(20))
            .await
            .unwrap();
        assert_eq!(done.output, Some(json!(output)));
        assert!(
            report.is_clean(),
            "{agent}: false divergence on the unchanged code:\n{report}"
        );
        run.served.shutdown().await;
        kernel.shutdown().await;
    }
}

/// An execution cancelled while a step ran never runs again: its unsettled steps are its
/// recorded end, not live steps, so the unchanged code replays clean.
#[tokio::test]
async fn a_cancelled_execution_replays_clean() {
    let kernel = DevKernel::start().await.unwrap();
    let run = held(&kernel, pair, "pair").await;
    kernel.cancel(&run.id).unwrap();
    run.release();
    let done = kernel
        .wait_terminal(&run.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(done.status, rebuno::wire::ExecutionStatus::Cancelled);
    let report = run.check(&kernel.history(&run.id).unwrap()).await;
    assert!(
        report.is_clean(),
        "false divergence on the unchanged code:\n{report}"
    );
    run.served.shutdown().await;
    kernel.shutdown().await;
}

/// A session agent reading `rebuno::previous()`: the first turn reads `null` (as on a kernel),
/// and a later turn's history, from the harness or fetched over HTTP, carries the state.
#[tokio::test]
async fn a_handler_that_reads_previous_replays_clean() {
    let agent = || {
        Agent::builder("turns").handler(|msg: String| async move {
            let prev = rebuno::previous().await?;
            let n = prev.as_u64().unwrap_or(0) + 1;
            let echoed = step("echo", move || async move { Ok::<_, HandlerError>(msg) }).await?;
            if let Ok(ctx) = rebuno::execution() {
                ctx.set_state(n)?;
            }
            Ok::<_, HandlerError>(json!({"turn": n, "echo": echoed}))
        })
    };
    let kernel = DevKernel::start().await.unwrap();
    let served = kernel.serve(agent()).await.unwrap();
    // First turn: no parent (previous is null on a real kernel).
    let first = kernel
        .create_execution(NewExecution::new("turns", json!("hi")).session("s1"))
        .await
        .unwrap();
    let first = kernel
        .wait_terminal(&first.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(first.output, Some(json!({"turn": 1, "echo": "hi"})));
    let history = kernel.history(&first.id).unwrap();
    let report = replay::check(agent(), &history).await.unwrap();
    assert!(
        report.is_clean(),
        "false divergence on the unchanged code:\n{report}"
    );

    // The second turn reads the first's state: its history carries it.
    let second = kernel
        .create_execution(NewExecution::new("turns", json!("again")).session("s1"))
        .await
        .unwrap();
    let second = kernel
        .wait_terminal(&second.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(second.output, Some(json!({"turn": 2, "echo": "again"})));
    let history = kernel.history(&second.id).unwrap();
    let report = replay::check(agent(), &history).await.unwrap();
    assert!(report.is_clean(), "{report}");
    let client = rebuno::client::Client::builder()
        .base_url(kernel.url())
        .build()
        .unwrap();
    let fetched = History::fetch(&client, &second.id).await.unwrap();
    assert_eq!(
        fetched, history,
        "fetched over HTTP, the previous state included"
    );
    let json = History::from_json(&history.to_json()).unwrap();
    assert!(
        replay::check(agent(), &json).await.unwrap().is_clean(),
        "through JSON"
    );
    served.shutdown().await;
    kernel.shutdown().await;
}

/// Repeated identical calls and null args, sequential and concurrent: sanity.
#[tokio::test]
async fn repeated_calls_and_null_args_replay_clean() {
    let agent = || {
        let unit = define_tool("unit").execute(|_: ()| async move { Ok::<_, HandlerError>(7) });
        Agent::builder("rep").handler(move |_: Value| {
            let unit = unit.clone();
            async move {
                let a = unit.call(()).await?;
                let (b, c) = futures_util::join!(unit.call(()), unit.call(()));
                let d = step("s", || async { Ok::<_, HandlerError>(1) }).await?;
                let e = step("s", || async { Ok::<_, HandlerError>(1) }).await?;
                Ok::<_, HandlerError>(a + b? + c? + d + e)
            }
        })
    };
    let kernel = DevKernel::start().await.unwrap();
    let served = kernel.serve(agent()).await.unwrap();
    let done = kernel.run("rep", Value::Null).await.unwrap();
    let history = kernel.history(&done.id).unwrap();
    let report = replay::check(agent(), &history).await.unwrap();
    assert!(report.is_clean(), "{report}");
    assert!(report.asked.iter().all(|s| s.verdict == Verdict::Replayed));
    served.shutdown().await;
    kernel.shutdown().await;
}

/// A fork's history (copied settled steps, then live ones) replays clean.
#[tokio::test]
async fn a_fork_history_replays_clean() {
    let agent = || {
        Agent::builder("three").handler(|_: Value| async move {
            let a = step("one", || async { Ok::<_, HandlerError>(1) }).await?;
            let b = step("two", || async { Ok::<_, HandlerError>(2) }).await?;
            let c = step("three", || async { Ok::<_, HandlerError>(3) }).await?;
            Ok::<_, HandlerError>(a + b + c)
        })
    };
    let kernel = DevKernel::start().await.unwrap();
    let served = kernel.serve(agent()).await.unwrap();
    let done = kernel.run("three", Value::Null).await.unwrap();
    let events = kernel.events(&done.id);
    let at = events
        .iter()
        .filter(|e| e.kind == "step.succeeded")
        .nth(1)
        .unwrap()
        .event_seq;
    let fork = kernel.fork(&done.id, at).unwrap();
    let forked = kernel
        .wait_terminal(&fork.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(forked.output, Some(json!(6)));
    let history = kernel.history(&fork.id).unwrap();
    let report = replay::check(agent(), &history).await.unwrap();
    assert!(report.is_clean(), "{report}");
    served.shutdown().await;
    kernel.shutdown().await;
}

/// A correct handler with two concurrent tool calls, one `at_most_once`: a crash at the sibling
/// leaves the at_most_once one unsettled too, the kernel fails it as indeterminate, and the
/// different outcome that follows is expected, not a problem.
#[tokio::test]
async fn crash_concurrent_at_most_once_sibling_is_not_a_problem() {
    fn fan() -> AgentBuilder {
        let slow = define_tool("charge")
            .idempotency(rebuno::Idempotency::AtMostOnce)
            .execute(|n: u32| async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Ok::<_, HandlerError>(n)
            });
        let fast = define_tool("lookup").execute(|n: u32| async move { Ok::<_, HandlerError>(n) });
        Agent::builder("fan").handler(move |n: u32| {
            let (slow, fast) = (slow.clone(), fast.clone());
            async move {
                let (x, y) = futures_util::join!(slow.call(n), fast.call(n + 1));
                Ok::<_, HandlerError>(x? + y?)
            }
        })
    }
    let kernel = DevKernel::start().await.unwrap();
    let report = rebuno_devkernel::crash::crash_every_step(&kernel, fan, json!(1))
        .await
        .unwrap();
    assert!(
        report.is_ok(),
        "false positive on a durable handler:\n{report}"
    );
    kernel.shutdown().await;
}

/// An execution the kernel failed (attempts exhausted) while a step ran: the unchanged code
/// stops at the unsettled step where the kernel cut it off, and that matches the record.
#[tokio::test]
async fn an_execution_failed_by_the_kernel_replays_clean() {
    let kernel = DevKernel::builder().max_attempts(1).start().await.unwrap();
    let run = held(&kernel, pair, "pair").await;
    let _ = kernel.redeliver(&run.id);
    let done = kernel
        .wait_terminal(&run.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(done.failure_reason, "dispatch_exhausted");
    run.release();
    let report = run.check(&kernel.history(&run.id).unwrap()).await;
    assert!(
        report.is_clean(),
        "false divergence on the unchanged code:\n{report}"
    );
    run.served.shutdown().await;
    kernel.shutdown().await;
}

/// A triage agent: look the customer up (safe to retry), then reply to them (at most once),
/// the reply built from the lookup. `strict` changes the lookup's arguments.
fn triage(strict: bool) -> AgentBuilder {
    let lookup = define_tool("lookup_customer").execute(|query: Value| async move {
        let email = query["email"].as_str().unwrap_or_default().to_owned();
        Ok::<_, HandlerError>(json!({ "id": format!("cus-{}", email.len()), "email": email }))
    });
    let reply = define_tool("send_reply")
        .idempotency(rebuno::Idempotency::AtMostOnce)
        .execute(|reply: Value| async move { Ok::<_, HandlerError>(reply["customer"].clone()) });
    Agent::builder("triage").handler(move |email: String| {
        let (lookup, reply) = (lookup.clone(), reply.clone());
        async move {
            let query = if strict {
                json!({ "email": email.to_lowercase(), "exact": true })
            } else {
                json!({ "email": email })
            };
            let customer = lookup.call(query).await?;
            let sent = reply
                .call(json!({ "customer": customer["id"], "text": "on it" }))
                .await?;
            Ok::<_, HandlerError>(sent)
        }
    })
}

/// Changing a `safe_to_retry` lookup's arguments stops the check at the lookup, but the
/// recorded `at_most_once` reply after it is counted: a re-delivery would run the lookup
/// live and may send the reply again, with whatever the new lookup returns.
#[tokio::test]
async fn an_at_most_once_step_after_the_divergence_is_possibly_dangerous() {
    let kernel = DevKernel::start().await.unwrap();
    let served = kernel.serve(triage(false)).await.unwrap();
    let done = kernel
        .run("triage", json!("Ada@Example.com"))
        .await
        .unwrap();
    let history = kernel.history(&done.id).unwrap();
    assert!(
        replay::check(triage(false), &history)
            .await
            .unwrap()
            .is_clean()
    );

    let report = replay::check(triage(true), &history).await.unwrap();
    assert!(!report.is_clean(), "{report}");
    let (asked, _) = report.divergence().expect("a divergence");
    assert_eq!(
        (asked.position, asked.target.as_str()),
        (1, "lookup_customer")
    );
    assert!(!asked.is_dangerous(), "the lookup itself is safe to retry");
    let dangers: Vec<_> = report.dangerous_steps().collect();
    assert_eq!(dangers.len(), 1, "{report}");
    assert_eq!(dangers[0].target(), "send_reply");
    assert!(
        matches!(dangers[0], replay::Danger::AfterDivergence { .. }),
        "{report}"
    );
    let text = report.to_string();
    assert!(
        text.contains("possibly dangerous: tool_call `send_reply`"),
        "{text}"
    );
    assert!(text.contains("after the divergence at step 1"), "{text}");
    served.shutdown().await;
    kernel.shutdown().await;
}
