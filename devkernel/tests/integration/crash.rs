//! The crash-at-every-step runner: a durable handler survives every crash point, and one that
//! reads the clock outside a step is caught.

use std::time::{SystemTime, UNIX_EPOCH};

use rebuno::{Agent, AgentBuilder, HandlerError, Idempotency, define_tool, step};
use rebuno_devkernel::DevKernel;
use rebuno_devkernel::crash::{CrashPoint, Problem, crash_every_step};
use serde_json::{Value, json};

/// search (safe to retry), a local step, then an email (at most once).
fn digest() -> AgentBuilder {
    let search = define_tool("search").execute(|q: String| async move {
        Ok::<_, HandlerError>(vec![format!("{q}: one"), format!("{q}: two")])
    });
    let send = define_tool("send_email")
        .idempotency(Idempotency::AtMostOnce)
        .execute(|body: String| async move {
            Ok::<_, HandlerError>(format!("sent {} bytes", body.len()))
        });
    Agent::builder("digest").handler(move |topic: String| {
        let (search, send) = (search.clone(), send.clone());
        async move {
            let found = search.call(topic).await?;
            let body = step("compose", move || async move {
                Ok::<_, HandlerError>(found.join("\n"))
            })
            .await?;
            let receipt = send.call(body).await?;
            Ok::<_, HandlerError>(json!({ "receipt": receipt }))
        }
    })
}

#[tokio::test]
async fn a_durable_handler_survives_a_crash_at_every_step_boundary() {
    let kernel = DevKernel::start().await.unwrap();
    let report = crash_every_step(&kernel, digest, json!("rust"))
        .await
        .unwrap();
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.outcome, json!({ "receipt": "sent 19 bytes" }));
    let targets: Vec<&str> = report.steps.iter().map(|s| s.target.as_str()).collect();
    assert_eq!(targets, ["search", "compose", "send_email"]);
    assert_eq!(
        report.scenarios.len(),
        12,
        "3 live steps x 4 points\n{report}"
    );

    for scenario in &report.scenarios {
        assert_eq!(scenario.deliveries, 2, "{report}");
        for step in &scenario.steps {
            match step.idempotency {
                Idempotency::AtMostOnce => assert!(step.body_runs <= 1, "{report}"),
                _ if step.status == "succeeded" => {
                    assert!(step.body_runs >= 1, "{report}");
                }
                _ => {}
            }
        }
    }
    // The guide's assertion, right for an agent with steps of both idempotencies: only
    // `at_most_once` bodies must never run twice; a `safe_to_retry` search cut off in its body
    // runs again, as it should.
    assert_eq!(report.at_most_once_ran_twice().count(), 0, "{report}");
    let every_step_once = report
        .scenarios
        .iter()
        .all(|s| s.steps.iter().all(|step| step.body_runs <= 1));
    assert!(
        !every_step_once,
        "a safe_to_retry step reruns after a crash in its body"
    );
    // The email cut off between its record and its result is the kernel's to refuse, not to
    // guess: both such crashes end as `indeterminate`, with the email sent at most once.
    let indeterminate: Vec<(usize, CrashPoint)> = report
        .scenarios
        .iter()
        .filter(|s| s.indeterminate)
        .map(|s| (s.step, s.point))
        .collect();
    assert_eq!(
        indeterminate,
        [(3, CrashPoint::AfterSubmit), (3, CrashPoint::InBody)]
    );
    // A search cut off in its body runs again on the re-delivery.
    let rerun = report
        .scenarios
        .iter()
        .find(|s| s.step == 1 && s.point == CrashPoint::InBody)
        .unwrap();
    assert_eq!(
        rerun
            .steps
            .iter()
            .find(|s| s.target == "search")
            .unwrap()
            .body_runs,
        2
    );
    let text = report.to_string();
    assert!(
        text.contains("12 crash points tried, 0 problem(s)"),
        "{text}"
    );
    assert!(text.contains("step 3 tool_call `send_email` (at_most_once), in body: ok (indeterminate, as it must be)"), "{text}");
    kernel.shutdown().await;
}

/// Stamps the report with the time, read outside any step: every re-delivery asks for
/// another step.
fn stamped() -> AgentBuilder {
    let publish =
        define_tool("publish").execute(|title: String| async move { Ok::<_, HandlerError>(title) });
    Agent::builder("stamped").handler(move |_: Value| {
        let publish = publish.clone();
        async move {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let title = publish.call(format!("report {nanos}")).await?;
            let done = step("archive", || async { Ok::<_, HandlerError>(true) }).await?;
            Ok::<_, HandlerError>(json!({ "title": title, "archived": done }))
        }
    })
}

#[tokio::test]
async fn a_handler_that_reads_the_clock_outside_a_step_is_caught() {
    let kernel = DevKernel::start().await.unwrap();
    let report = crash_every_step(&kernel, stamped, json!({})).await.unwrap();
    assert!(!report.is_ok(), "{report}");
    let abandoned: Vec<(usize, CrashPoint, &str)> = report
        .problems()
        .filter_map(|(scenario, problem)| match problem {
            Problem::Abandoned(step) => Some((scenario.step, scenario.point, step.target.as_str())),
            _ => None,
        })
        .collect();
    // Once `publish` is recorded (settled or not), the re-delivery asks for a differently
    // stamped one instead. Each execution's title is its own, so outcomes are not compared:
    // only the crash before `publish` reached the kernel is survived.
    for point in [
        CrashPoint::AfterSubmit,
        CrashPoint::InBody,
        CrashPoint::AfterComplete,
    ] {
        assert!(
            abandoned.contains(&(1, point, "publish")),
            "{point}\n{report}"
        );
    }
    assert!(
        abandoned.contains(&(2, CrashPoint::BeforeSubmit, "publish")),
        "{report}"
    );
    assert!(!report.stable_outcome);
    let outcome_differs = |(_, p): (_, &Problem)| matches!(p, Problem::OutcomeDiffers { .. });
    assert!(!report.problems().any(outcome_differs), "{report}");
    let survived: Vec<(usize, CrashPoint)> = report
        .scenarios
        .iter()
        .filter(|s| s.problems.is_empty())
        .map(|s| (s.step, s.point))
        .collect();
    assert_eq!(survived, [(1, CrashPoint::BeforeSubmit)], "{report}");
    let text = report.to_string();
    assert!(
        text.contains("not deterministic outside its steps"),
        "{text}"
    );
    assert!(text.contains("outcomes not compared, steps only"), "{text}");
    kernel.shutdown().await;
}

/// The same stamp read inside a step: recorded once, replayed after every crash.
fn stamped_durably() -> AgentBuilder {
    let publish =
        define_tool("publish").execute(|title: String| async move { Ok::<_, HandlerError>(title) });
    Agent::builder("stamped-durably").handler(move |_: Value| {
        let publish = publish.clone();
        async move {
            let nanos = step("now", || async {
                Ok::<_, HandlerError>(
                    SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos()),
                )
            })
            .await?;
            let title = publish.call(format!("report {nanos}")).await?;
            Ok::<_, HandlerError>(json!({ "title": title }))
        }
    })
}

#[tokio::test]
async fn a_clock_read_inside_a_step_survives_every_crash() {
    let kernel = DevKernel::start().await.unwrap();
    let report = crash_every_step(&kernel, stamped_durably, json!({}))
        .await
        .unwrap();
    assert!(report.is_ok(), "{report}");
    assert!(!report.stable_outcome, "each execution has its own stamp");
    assert_eq!(report.scenarios.len(), 8, "{report}");
    kernel.shutdown().await;
}
