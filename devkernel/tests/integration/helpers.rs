//! The harness's test helpers: waiting for an event without polling, and policy cases in the
//! Go kernel's `*.policytest.yaml` format run from `cargo test`.

use std::sync::Arc;
use std::time::Duration;

use rebuno::{Agent, HandlerError, define_tool, step};
use rebuno_devkernel::{DevKernel, DevKernelError, EventKind, ExecutionExt, NewExecution, Policy};
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

const GATED: &str = "rules:\n  - id: gate\n    when: { target: deploy }\n    then: { decision: require_approval }\n";

#[tokio::test]
async fn a_test_waits_for_an_approval_request_grants_it_and_waits_for_the_end() {
    let kernel = DevKernel::start().await.unwrap();
    let deploy = define_tool("deploy")
        .execute(|env: String| async move { Ok::<_, HandlerError>(format!("deployed {env}")) });
    let agent = Agent::builder("deployer").handler(move |env: String| {
        let deploy = deploy.clone();
        async move { Ok::<_, HandlerError>(deploy.call(env).await?) }
    });
    let served = kernel.serve(agent).await.unwrap();
    kernel.set_policy("deployer", GATED).unwrap();
    let created = kernel
        .create_execution(NewExecution::new("deployer", json!("prod")))
        .await
        .unwrap();

    let wait = Duration::from_secs(10);
    let requested = kernel
        .wait_for_event(&created.id, EventKind::ApprovalRequested, wait)
        .await
        .unwrap();
    let approval = requested.payload["approval_id"].as_str().unwrap();
    kernel.grant(approval).unwrap();
    let completed = kernel
        .wait_for_event(&created.id, EventKind::ExecutionCompleted, wait)
        .await
        .unwrap();
    assert!(completed.event_seq > requested.event_seq);
    let done = kernel.execution(&created.id).unwrap();
    assert_eq!(done.output_as::<String>().unwrap(), "deployed prod");
    assert!(done.output_as::<u32>().is_err());
    let kinds = kernel.event_kinds(&created.id);
    let position = |kind| kinds.iter().position(|k| *k == kind).unwrap();
    assert!(position(EventKind::ApprovalRequested) < position(EventKind::ApprovalGranted));
    assert!(position(EventKind::ApprovalGranted) < position(EventKind::StepSucceeded));
    // The resumed dispatch's `dispatch.acked` may come after the end (acknowledged at once).
    let last = kinds.iter().rev().find(|k| **k != EventKind::DispatchAcked);
    assert_eq!(last, Some(&EventKind::ExecutionCompleted));
    assert_eq!(
        kinds.len(),
        kernel.events(&created.id).len(),
        "every kind is known"
    );

    // An event an ended execution never logged never comes: an error at once, not a hang,
    // saying how the execution ended.
    let missing = kernel
        .wait_for_event(
            &created.id,
            EventKind::ExecutionFailed,
            Duration::from_secs(10),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(missing, DevKernelError::Ended { .. }),
        "{missing:?}"
    );
    assert!(
        missing
            .to_string()
            .contains(r#"completed with output "deployed prod""#),
        "{missing}"
    );
    served.shutdown().await;
    kernel.shutdown().await;
}

#[tokio::test]
async fn a_lease_reclaimed_by_the_sweep_wakes_a_waiter() {
    let kernel = DevKernel::builder()
        .manual_clock()
        .default_lease_timeout(Duration::from_secs(30))
        .start()
        .await
        .unwrap();
    // Held until released, on this delivery and on the re-delivery after the reclaim.
    let entered = Arc::new(Notify::new());
    let (release, held) = watch::channel(false);
    let started = Arc::clone(&entered);
    let agent = Agent::builder("held").handler(move |_: Value| {
        let (started, mut held) = (Arc::clone(&started), held.clone());
        async move {
            step("hold", move || async move {
                started.notify_one();
                let _ = held.wait_for(|released| *released).await;
                Ok::<_, HandlerError>(1)
            })
            .await
            .map_err(HandlerError::from)
        }
    });
    let served = kernel.serve(agent).await.unwrap();
    let created = kernel
        .create_execution(NewExecution::new("held", json!({})))
        .await
        .unwrap();
    entered.notified().await;
    let waiter = {
        let kernel = kernel.clone();
        tokio::spawn(async move {
            kernel
                .wait_for_event(
                    &created.id,
                    EventKind::DispatchReclaimed,
                    Duration::from_secs(10),
                )
                .await
        })
    };
    // Past the lease in one stride: the sweep reclaims before the agent's heartbeat wakes.
    kernel.advance(Duration::from_secs(31)).unwrap();
    let reclaimed = waiter.await.unwrap().unwrap();
    assert_eq!(reclaimed.payload["error"], "lease_expired");
    release.send_replace(true);
    served.shutdown().await;
    kernel.shutdown().await;
}

const BUNDLE: &str = r#"
default_action: deny
rules:
  - id: reads
    when: { target: "search*" }
    then: { decision: allow }
  - id: writes
    when: { target: write_file, arguments: { path: { regex: "^/tmp/" } } }
    then: { decision: allow }
  - id: models
    when: { step_kind: llm_call }
    then: { decision: allow }
  - id: unused
    when: { target: never_called }
    then: { decision: deny }
"#;

/// The Go kernel's `*.policytest.yaml` format: `agent_id`, then `cases`.
const CASES: &str = r#"
agent_id: files
cases:
  - name: a search
    target: search_web
    args: { q: rust }
    expect: allow
    expect_rule: reads
  - name: a write under /tmp
    target: write_file
    args: { path: /tmp/notes.txt }
    expect: allow
  - name: a write elsewhere
    target: write_file
    args: { path: /etc/passwd }
    expect: deny
    expect_rule: default
  - name: a model call
    kind: llm_call
    target: gpt-4o
    expect: allow
"#;

#[test]
fn policy_cases_in_the_kernel_format_run_from_cargo_test() {
    let policy = Policy::parse(BUNDLE).unwrap();
    let report = policy.test_cases(CASES).unwrap();
    assert!(report.passed(), "{report}");
    assert_eq!(report.results.len(), 4);
    assert_eq!(report.results[2].rule_id, "default");
    assert_eq!(report.unexercised_rules, ["unused"]);

    let wrong = CASES.replace(
        "path: /etc/passwd }\n    expect: deny",
        "path: /etc/passwd }\n    expect: allow",
    );
    let report = policy.test_cases(&wrong).unwrap();
    assert!(!report.passed());
    assert_eq!(report.failed, 1);
    let text = report.to_string();
    assert!(text.contains("3 of 4 cases passed"), "{text}");
    assert!(
        text.contains("FAIL a write elsewhere: deny, want allow"),
        "{text}"
    );
    assert!(text.contains("rules no case reached: unused"), "{text}");

    let error = policy
        .test_cases("cases: [{ name: no target }]")
        .unwrap_err();
    assert!(error.to_string().contains("missing target"), "{error}");
    let error = policy
        .test_cases("cases: [{ target: x, expect: maybe }]")
        .unwrap_err();
    assert!(error.to_string().contains("unknown expect"), "{error}");
    assert!(policy.test_cases("bogus: 1").is_err());
}

#[tokio::test]
async fn the_timeline_draws_a_real_run_with_a_redelivery() {
    let kernel = DevKernel::start().await.unwrap();
    let (release, held) = watch::channel(false);
    let search = define_tool("search").execute(|q: String| async move { Ok::<_, HandlerError>(q) });
    let agent = Agent::builder("drawn").handler(move |_: Value| {
        let (search, mut held) = (search.clone(), held.clone());
        async move {
            search.call("news".to_owned()).await?;
            step("summarize", move || async move {
                let _ = held.wait_for(|released| *released).await;
                Ok::<_, HandlerError>("short".to_owned())
            })
            .await
            .map_err(HandlerError::from)
        }
    });
    let served = kernel.serve(agent).await.unwrap();
    let created = kernel
        .create_execution(NewExecution::new("drawn", json!({})))
        .await
        .unwrap();
    let wait = Duration::from_secs(10);
    kernel
        .wait_for_event(&created.id, EventKind::StepSucceeded, wait)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await; // the summary starts, then the "crash"
    kernel.redeliver(&created.id).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    release.send_replace(true);
    kernel.wait_terminal(&created.id, wait).await.unwrap();

    let args = [
        "exec",
        "timeline",
        &created.id,
        &format!("--url={}", kernel.url()),
    ];
    let (code, drawn, err) = crate::common::rebuno_dev(&args).await;
    assert_eq!(code, 0, "{err}");
    let row = |label: &str| {
        drawn
            .lines()
            .find(|l| l.trim_start().starts_with(label))
            .unwrap_or_else(|| panic!("no {label}:\n{drawn}"))
    };
    assert!(
        drawn.starts_with(&format!("execution {}: completed", created.id)),
        "{drawn}"
    );
    assert!(
        row("dispatch 1, attempt 1").ends_with("superseded"),
        "{drawn}"
    );
    assert!(
        row("dispatch 2, attempt 2").ends_with("completed"),
        "{drawn}"
    );
    assert!(row("tool_call search").ends_with("succeeded"), "{drawn}");
    // Re-run on the second attempt, but the kernel logs a fresh `step.executing` for a rerun
    // only when it touches resources: the log, and so the row, shows one run.
    assert!(row("local summarize").ends_with("succeeded"), "{drawn}");
    let first = row("dispatch 1, attempt 1")
        .chars()
        .skip(30)
        .position(|c| c == '▓');
    let second = row("dispatch 2, attempt 2")
        .chars()
        .skip(30)
        .position(|c| c == '▓');
    assert!(first < second, "attempt 2 starts after attempt 1:\n{drawn}");
    served.shutdown().await;
    kernel.shutdown().await;
}
