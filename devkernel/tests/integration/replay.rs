//! The replay checker against histories the dev kernel recorded from real SDK agents: a deploy
//! between two dispatches of one execution, caught before the second, then confirmed by it.

use std::future::pending;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rebuno::{Agent, AgentBuilder, HandlerError, Idempotency, Tool, define_tool, step};
use rebuno_devkernel::replay::{self, Ending, History, Verdict};
use rebuno_devkernel::{DevKernel, NewExecution};
use serde_json::{Value, json};

/// Switches shared by every build of the mailer: which code is deployed, whether the current
/// dispatch "dies" after the email, and how often each tool body really ran.
#[derive(Clone, Default)]
struct World {
    v2: Arc<AtomicBool>,
    hold: Arc<AtomicBool>,
    searched: Arc<AtomicUsize>,
    sent: Arc<AtomicUsize>,
}

#[derive(Clone)]
struct Mailer {
    world: World,
    search: Tool<String, Vec<String>>,
    send: Tool<Value, String>,
}

/// The mailer agent: search, send a digest (at most once), archive. Version 2 changes the
/// email's subject, which changes the send step's identity.
fn mailer(world: &World) -> AgentBuilder {
    let searched = Arc::clone(&world.searched);
    let search = define_tool("search").execute(move |query: String| {
        searched.fetch_add(1, Ordering::SeqCst);
        async move {
            Ok::<_, HandlerError>(vec![format!("{query}: rust 2.0"), format!("{query}: wasm")])
        }
    });
    let sent = Arc::clone(&world.sent);
    let send = define_tool("send_email")
        .idempotency(Idempotency::AtMostOnce)
        .execute(move |email: Value| {
            sent.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, HandlerError>(format!("sent {}", email["subject"])) }
        });
    let state = Mailer {
        world: world.clone(),
        search,
        send,
    };
    Agent::builder("mailer").handler_with_state(state, |m: Mailer, to: String| async move {
        let items = m.search.call("weekly news".to_owned()).await?;
        let subject = if m.world.v2.load(Ordering::SeqCst) {
            "Your weekly digest"
        } else {
            "Weekly digest"
        };
        let email = json!({ "to": to, "subject": subject, "items": items.len() });
        let receipt = m.send.call(email).await?;
        if m.world.hold.load(Ordering::SeqCst) {
            pending::<()>().await; // this dispatch "dies" here
        }
        let archived = step("archive", || async { Ok::<_, HandlerError>(true) }).await?;
        Ok::<_, HandlerError>(format!("{receipt}; archived: {archived}"))
    })
}

/// A second build of the mailer for a check: its own switches, the same counters.
fn build(world: &World, v2: bool) -> AgentBuilder {
    let checked = World {
        v2: Arc::new(AtomicBool::new(v2)),
        hold: Arc::new(AtomicBool::new(false)),
        ..world.clone()
    };
    mailer(&checked)
}

async fn wait_for_steps(kernel: &DevKernel, id: &str, succeeded: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while kernel
        .steps(id)
        .iter()
        .filter(|s| s.status == "succeeded")
        .count()
        < succeeded
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "steps never recorded"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_handler_changed_between_two_dispatches_is_named_before_the_second_runs() {
    let world = World::default();
    world.hold.store(true, Ordering::SeqCst);
    let kernel = DevKernel::start().await.unwrap();
    let served = kernel.serve(mailer(&world)).await.unwrap();
    let created = kernel
        .create_execution(NewExecution::new("mailer", json!("ada@example.com")))
        .await
        .unwrap();
    wait_for_steps(&kernel, &created.id, 2).await; // search and send recorded; dispatch held
    let history = kernel.history(&created.id).unwrap();

    // The build that recorded it replays it: the archive step is the natural next one.
    let same = replay::check(build(&world, false), &history).await.unwrap();
    assert!(same.is_clean(), "{same}");
    assert_eq!(same.asked.len(), 3, "{same}");
    assert_eq!(same.asked[2].target, "archive");
    assert_eq!(same.asked[2].verdict, Verdict::New);
    assert_eq!(same.ending, Ending::Stopped);

    // The new build asks for another email at step 2: named, with its idempotency.
    let report = replay::check(build(&world, true), &history).await.unwrap();
    assert!(!report.is_clean(), "{report}");
    let (asked, expected) = report.divergence().expect("a divergence");
    assert_eq!((asked.position, asked.target.as_str()), (2, "send_email"));
    assert_eq!(asked.idempotency, "at_most_once");
    assert_eq!(asked.args["subject"], "Your weekly digest");
    let expected = expected.expect("the recorded step expected there");
    assert_eq!(expected.target, "send_email");
    assert_eq!(expected.args.as_ref().unwrap()["subject"], "Weekly digest");
    assert_eq!(report.dangerous_steps().count(), 1);
    assert_eq!(report.unreached.len(), 1);
    let text = report.to_string();
    assert!(
        text.contains(r#"step 2: the history has tool_call `send_email` with {"items":2,"subject":"Weekly digest","to":"ada@example.com"} (at_most_once); this code asked for tool_call `send_email` with {"items":2,"subject":"Your weekly digest","to":"ada@example.com"} (at_most_once), which would run live"#),
        "{text}"
    );
    assert!(
        text.contains("at_most_once: would take effect again"),
        "{text}"
    );

    // Neither check ran a tool body.
    assert_eq!(world.searched.load(Ordering::SeqCst), 1);
    assert_eq!(world.sent.load(Ordering::SeqCst), 1);

    // Deploy anyway: the re-delivery does what the report said, a second email.
    world.v2.store(true, Ordering::SeqCst);
    world.hold.store(false, Ordering::SeqCst);
    kernel.redeliver(&created.id).unwrap();
    let done = kernel
        .wait_terminal(&created.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(
        done.output,
        Some(json!("sent \"Your weekly digest\"; archived: true"))
    );
    assert_eq!(
        world.sent.load(Ordering::SeqCst),
        2,
        "the predicted second email"
    );
    assert_eq!(world.searched.load(Ordering::SeqCst), 1, "search replayed");

    // The finished history keeps both emails, so each build leaves the other's unreached:
    // the trace of a deploy in mid-execution. Everything else replays and the output matches.
    let finished = kernel.history(&created.id).unwrap();
    assert_eq!(finished.steps().len(), 4);
    let v2 = replay::check(build(&world, true), &finished).await.unwrap();
    assert!(!v2.is_clean(), "{v2}");
    assert_eq!(v2.live_steps().count(), 0, "{v2}");
    assert_eq!(v2.ending, Ending::Completed(done.output.clone().unwrap()));
    assert_eq!(v2.unreached.len(), 1, "{v2}");
    assert_eq!(
        v2.unreached[0].args.as_ref().unwrap()["subject"],
        "Weekly digest"
    );
    let v1 = replay::check(build(&world, false), &finished)
        .await
        .unwrap();
    assert!(!v1.is_clean(), "{v1}");
    assert_eq!(v1.unreached.len(), 1, "{v1}");
    assert_eq!(
        v1.unreached[0].args.as_ref().unwrap()["subject"],
        "Your weekly digest"
    );
    assert!(
        v1.to_string().contains("outcome: recorded Completed"),
        "{v1}"
    );
    assert_eq!(
        world.sent.load(Ordering::SeqCst),
        2,
        "the checks sent nothing"
    );
    served.shutdown().await;
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_history_reads_the_same_from_the_harness_the_http_api_and_its_json() {
    let world = World::default();
    let kernel = DevKernel::start().await.unwrap();
    let served = kernel.serve(mailer(&world)).await.unwrap();
    let done = kernel.run("mailer", json!("bo@example.com")).await.unwrap();
    let id = done.id.to_string();

    let local = kernel.history(&done.id).unwrap();
    let client = rebuno::client::Client::builder()
        .base_url(kernel.url())
        .build()
        .unwrap();
    let fetched = History::fetch(&client, &id).await.unwrap();
    assert_eq!(fetched, local);
    let reread = History::from_json(&local.to_json()).unwrap();
    assert_eq!(reread, local);
    let url = format!("--url={}", kernel.url());
    let (code, exported, err) = crate::common::rebuno_dev(&["exec", "export", &id, &url]).await;
    assert_eq!(code, 0, "{err}");
    let exported = History::from_json(&exported).unwrap();
    assert_eq!(exported, local, "rebuno-dev exec export");
    let order: Vec<&str> = local.steps().iter().map(|s| s.target.as_str()).collect();
    assert_eq!(
        order,
        ["search", "send_email", "archive"],
        "steps in the order they ran"
    );

    let other = Agent::builder("not-the-mailer")
        .handler(|_: Value| async move { Ok::<_, HandlerError>(()) });
    let mixed_up = replay::check(other, &reread).await.unwrap();
    assert!(
        mixed_up.notes[0].contains("recorded by agent `mailer`, not `not-the-mailer`"),
        "{mixed_up}"
    );
    let report = replay::check(build(&world, false), &reread).await.unwrap();
    assert!(report.is_clean(), "{report}");
    assert!(report.asked.iter().all(|s| s.verdict == Verdict::Replayed));
    assert!(
        report
            .to_string()
            .contains("3 of 3 recorded steps replayed"),
        "{report}"
    );
    served.shutdown().await;
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_failure_replays_as_recorded_and_a_different_one_is_reported() {
    let kernel = DevKernel::start().await.unwrap();
    let failing = |message: &'static str| {
        Agent::builder("failing").handler(move |_: Value| async move {
            step("check", || async { Ok::<_, HandlerError>(1) }).await?;
            Err::<Value, _>(HandlerError::from(message))
        })
    };
    let served = kernel.serve(failing("quota exceeded")).await.unwrap();
    let done = kernel.run("failing", json!({})).await.unwrap();
    let history = kernel.history(&done.id).unwrap();

    let same = replay::check(failing("quota exceeded"), &history)
        .await
        .unwrap();
    assert!(same.is_clean(), "{same}");
    let other = replay::check(failing("disk full"), &history).await.unwrap();
    assert!(!other.is_clean(), "{other}");
    assert!(matches!(&other.ending, Ending::Failed(reason) if reason.contains("disk full")));
    assert!(
        other.to_string().contains("outcome: recorded Failed"),
        "{other}"
    );
    served.shutdown().await;
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_history_that_is_not_one_is_a_clear_error() {
    let error = History::from_json(r#"{"steps": []}"#).unwrap_err();
    assert!(error.to_string().starts_with("not a history:"), "{error}");
    let error = History::from_json("garbage").unwrap_err();
    assert!(error.to_string().contains("not a history"), "{error}");
}

const OPS_POLICY: &str = r#"
default_action: allow
rules:
  - id: no-rm
    when: { target: "rm*" }
    then: { decision: deny, reason: destructive }
  - id: gate-email
    when: { target: send_email }
    then: { decision: require_approval }
"#;

/// search (allowed), rm_tmp (denied by policy, handled), send_email (waits for an approval).
fn ops() -> AgentBuilder {
    let search = define_tool("search").execute(|q: String| async move { Ok::<_, HandlerError>(q) });
    let rm = define_tool("rm_tmp").execute(|_: String| async move { Ok::<_, HandlerError>(()) });
    let send =
        define_tool("send_email").execute(|to: String| async move { Ok::<_, HandlerError>(to) });
    Agent::builder("ops").handler(move |_: Value| {
        let (search, rm, send) = (search.clone(), rm.clone(), send.clone());
        async move {
            search.call("logs".to_owned()).await?;
            let refused = rm.call("/tmp".to_owned()).await.is_err();
            let sent = send.call("ops@example.com".to_owned()).await?;
            Ok::<_, HandlerError>(format!("{refused} {sent}"))
        }
    })
}

#[tokio::test]
async fn denials_and_approvals_replay_as_the_kernel_decided_them() {
    let kernel = DevKernel::start().await.unwrap();
    let served = kernel.serve(ops()).await.unwrap();
    kernel.set_policy("ops", OPS_POLICY).unwrap();
    let created = kernel
        .create_execution(NewExecution::new("ops", json!({})))
        .await
        .unwrap();
    kernel
        .wait_until(&created.id, Duration::from_secs(20), |s| {
            s == rebuno::wire::ExecutionStatus::Blocked
        })
        .await
        .unwrap();
    let history = kernel.history(&created.id).unwrap();

    let report = replay::check(ops(), &history).await.unwrap();
    assert!(report.is_clean(), "{report}");
    let verdicts: Vec<Verdict> = report.asked.iter().map(|s| s.verdict).collect();
    assert_eq!(
        verdicts,
        [
            Verdict::Replayed,
            Verdict::Denied,
            Verdict::AwaitingApproval
        ]
    );
    assert_eq!(report.ending, Ending::Stopped);
    served.shutdown().await;
    kernel.shutdown().await;
}

/// One tool, `work`, whose body does not return while `hold` is set: the dispatch is cut
/// off inside it for as long as the test needs.
fn worker(
    id: &str,
    idempotency: Idempotency,
    hold: Arc<AtomicBool>,
    runs: Arc<AtomicUsize>,
) -> AgentBuilder {
    let work = define_tool("work")
        .idempotency(idempotency)
        .execute(move |n: u32| {
            runs.fetch_add(1, Ordering::SeqCst);
            let hold = Arc::clone(&hold);
            async move {
                while hold.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Ok::<_, HandlerError>(n * 2)
            }
        });
    Agent::builder(id).handler(move |n: u32| {
        let work = work.clone();
        async move { Ok::<_, HandlerError>(work.call(n).await?) }
    })
}

#[tokio::test]
async fn a_step_cut_off_mid_body_is_rerun_or_indeterminate_by_its_idempotency() {
    let kernel = DevKernel::start().await.unwrap();
    for (id, idempotency, verdict) in [
        ("safe-work", Idempotency::SafeToRetry, Verdict::Rerun),
        ("once-work", Idempotency::AtMostOnce, Verdict::Indeterminate),
    ] {
        let runs = Arc::new(AtomicUsize::new(0));
        let hold = Arc::new(AtomicBool::new(true));
        let served = kernel
            .serve(worker(
                id,
                idempotency,
                Arc::clone(&hold),
                Arc::clone(&runs),
            ))
            .await
            .unwrap();
        let created = kernel
            .create_execution(NewExecution::new(id, json!(21)))
            .await
            .unwrap();
        while runs.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let history = kernel.history(&created.id).unwrap();
        assert_eq!(history.steps()[0].status, "executing");

        let free = Arc::new(AtomicBool::new(false));
        let report = replay::check(worker(id, idempotency, free, Arc::clone(&runs)), &history)
            .await
            .unwrap();
        assert_eq!(report.asked.len(), 1, "{report}");
        assert_eq!(report.asked[0].verdict, verdict, "{report}");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "the check ran no body");
        match verdict {
            // The kernel would run it again: the natural next step of a running execution.
            Verdict::Rerun => {
                assert!(report.is_clean(), "{report}");
                assert!(
                    report.to_string().contains("unsettled, would run again"),
                    "{report}"
                );
            }
            // The kernel would fail it as indeterminate, and this handler does not reconcile.
            _ => {
                assert!(
                    matches!(&report.ending, Ending::Failed(r) if r.contains("outcome unknown")),
                    "{report}"
                );
                assert!(!report.is_clean(), "{report}");
            }
        }
        hold.store(false, Ordering::SeqCst); // the held body ends; the execution completes
        let done = kernel
            .wait_terminal(&created.id, Duration::from_secs(20))
            .await
            .unwrap();
        assert_eq!(done.output, Some(json!(42)));
        served.shutdown().await;
    }
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_run_that_never_ends_is_reported_as_far_as_it_got() {
    // Swallows every refusal and tries again: on replay it never ends by itself.
    let stubborn = || {
        let search =
            define_tool("search").execute(|q: String| async move { Ok::<_, HandlerError>(q) });
        Agent::builder("stubborn").handler(move |q: String| {
            let search = search.clone();
            async move {
                let first = search.call(q.clone()).await?;
                loop {
                    if search.call(format!("{q} again")).await.is_ok() {
                        return Ok::<_, HandlerError>(first);
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        })
    };
    let kernel = DevKernel::start().await.unwrap();
    let search = define_tool("search").execute(|q: String| async move { Ok::<_, HandlerError>(q) });
    let recorded = Agent::builder("stubborn").handler(move |q: String| {
        let search = search.clone();
        async move { Ok::<_, HandlerError>(search.call(q).await?) }
    });
    let served = kernel.serve(recorded).await.unwrap();
    let done = kernel.run("stubborn", json!("rust")).await.unwrap();
    let history = kernel.history(&done.id).unwrap();

    let limit = Duration::from_millis(200);
    let report = replay::check_within(stubborn(), &history, limit)
        .await
        .unwrap();
    assert_eq!(report.ending, Ending::TimedOut(limit));
    assert!(!report.is_clean(), "{report}");
    // The recorded search replays; the first retry is new and stopped there; the later ones
    // are refused by the SDK without reaching the kernel.
    let verdicts: Vec<Verdict> = report.asked.iter().map(|s| s.verdict).collect();
    assert_eq!(verdicts, [Verdict::Replayed, Verdict::New], "{report}");
    assert!(report.to_string().contains("TimedOut"), "{report}");
    let swallowed = |n: &String| n.contains("swallows control flow");
    assert!(report.notes.iter().any(swallowed), "{report}");
    served.shutdown().await;
    kernel.shutdown().await;
}
