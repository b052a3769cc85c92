//! Delivery retries are configurable: the attempts and the backoff of `DispatchRetry` are what
//! an unreachable agent's event log shows (on the manual clock), and `rebuno-dev` takes them
//! from its flags, its environment and its manifest, in that order, refusing bad values.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use rebuno_devkernel::{AgentSpec, DevKernel, DispatchRetry, NewExecution};
use serde_json::{Value, json};

use crate::common::{SECRET, client, event_types, events_of};
use crate::restart::{events, free_port, wait_ready};

/// A webhook URL nobody listens on: every delivery is a connect error.
fn unreachable_webhook() -> String {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/webhook", closed.local_addr().unwrap());
    drop(closed);
    url
}

async fn wait_for_count(kernel: &DevKernel, id: &str, kind: &str, count: usize) {
    for _ in 0..500 {
        if events_of(kernel, id, kind).len() >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("fewer than {count} {kind} in {:?}", event_types(kernel, id));
}

/// Lets whatever is due run, then checks no new attempt was made.
async fn still_failed(kernel: &DevKernel, id: &str, count: usize) {
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(events_of(kernel, id, "dispatch.failed").len(), count);
}

#[tokio::test]
async fn an_unreachable_agent_gets_the_configured_attempts_after_the_configured_delays() {
    let mut retry = DispatchRetry::default();
    retry.max_attempts = Some(3);
    retry.base_delay = Some(Duration::from_secs(10));
    retry.max_delay = Some(Duration::from_secs(15));
    let builder = DevKernel::builder()
        .manual_clock()
        .dispatch_retry(retry)
        .unwrap();
    let kernel = builder
        .agent(AgentSpec::new("hello", unreachable_webhook(), SECRET))
        .start()
        .await
        .unwrap();
    let id = kernel
        .create_execution(NewExecution::new("hello", json!({})))
        .await
        .unwrap()
        .id;
    let secs = Duration::from_secs_f64;
    wait_for_count(&kernel, &id, "dispatch.failed", 1).await;
    // Attempt 2 waits the base delay (10 s, plus up to 25 % jitter) and not less.
    kernel.advance(secs(9.9)).unwrap();
    still_failed(&kernel, &id, 1).await;
    kernel.advance(secs(2.6)).unwrap();
    wait_for_count(&kernel, &id, "dispatch.failed", 2).await;
    // Attempt 3 waits the max delay (20 s capped to 15 s, plus jitter) and not less.
    kernel.advance(secs(14.9)).unwrap();
    still_failed(&kernel, &id, 2).await;
    kernel.advance(secs(3.9)).unwrap();
    let ended = kernel
        .wait_terminal(&id, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(ended.failure_reason, "dispatch_exhausted");

    let failed = events_of(&kernel, &id, "dispatch.failed");
    let attempts: Vec<&Value> = failed.iter().map(|e| &e.payload["attempt"]).collect();
    assert_eq!(attempts, [1, 2, 3]);
    assert!(failed.iter().all(|e| e.payload["error"] == "connect"));
    assert_eq!(failed[2].payload["status"], "exhausted");
    let last = &events_of(&kernel, &id, "execution.failed")[0].payload["last_delivery"];
    assert_eq!(last["attempt"], 3);
    // Out of attempts: no fourth, however long the clock runs.
    kernel.advance(Duration::from_secs(3600)).unwrap();
    still_failed(&kernel, &id, 3).await;
    kernel.shutdown().await;
}

/// Where a `rebuno-dev` gets its retries from, besides its manifest.
#[derive(Default)]
struct Sources<'a> {
    flags: &'a [&'a str],
    env: &'a [(&'a str, &'a str)],
}

/// Runs `rebuno-dev` with `manifest` and `sources`, creates an execution of its agent (whose
/// webhook nobody answers) and returns its event log once it failed.
async fn failed_run(manifest: &Path, sources: Sources<'_>) -> Vec<Value> {
    let addr = free_port();
    let url = format!("http://{addr}");
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_rebuno-dev"));
    command
        .args(["--addr", &addr.to_string(), "--config"])
        .arg(manifest)
        .args(sources.flags);
    for name in RETRY_VARIABLES {
        command.env_remove(name);
    }
    let _kernel = command
        .envs(sources.env.iter().copied())
        .env_remove("REBUNO_BEARER_TOKEN")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait_ready(&url).await;
    let body = json!({"agent_id": "hello", "input": {}}).to_string();
    let (status, created) =
        client("POST", &format!("{url}/v0/executions"), None, Some(&body)).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    for _ in 0..1000 {
        let log = events(&url, &id).await;
        if log.iter().any(|e| e["type"] == "execution.failed") {
            return log;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{id} did not fail: {:?}", events(&url, &id).await);
}

const RETRY_VARIABLES: [&str; 3] = [
    "REBUNO_DISPATCH_MAX_ATTEMPTS",
    "REBUNO_DISPATCH_BASE_DELAY",
    "REBUNO_DISPATCH_MAX_DELAY",
];

fn failures(log: &[Value]) -> Vec<&Value> {
    log.iter()
        .filter(|e| e["type"] == "dispatch.failed")
        .collect()
}

/// Nanoseconds between two events of the wire log.
fn gap(from: &Value, to: &Value) -> Duration {
    let at = |event: &Value| {
        let text = event["occurred_at"].as_str().unwrap();
        let stamp: crate::common::time::Timestamp = serde_json::from_value(json!(text)).unwrap();
        stamp.unix_nanos()
    };
    Duration::from_nanos(u64::try_from(at(to) - at(from)).unwrap())
}

fn manifest(dir: &Path, webhook: &str) -> std::path::PathBuf {
    let path = dir.join("manifest.yaml");
    let yaml = format!(
        "dispatch_max_attempts: 4\ndispatch_base_delay: 10ms\ndispatch_max_delay: 20ms\n\
         agents:\n  - id: hello\n    webhook_url: {webhook}\n    secret: {SECRET}\n"
    );
    std::fs::write(&path, yaml).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuno_dev_takes_retries_from_flags_then_environment_then_manifest() {
    let dir = std::env::temp_dir().join(format!("rebuno-retry-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = manifest(&dir, &unreachable_webhook());
    let env = [("REBUNO_DISPATCH_MAX_ATTEMPTS", "3")];
    let flags = [
        "--dispatch-max-attempts",
        "2",
        "--dispatch-base-delay=300ms",
        "--dispatch-max-delay",
        "300ms",
    ];
    let (from_manifest, from_env, from_flags) = tokio::join!(
        failed_run(&manifest, Sources::default()),
        failed_run(
            &manifest,
            Sources {
                flags: &[],
                env: &env
            }
        ),
        failed_run(
            &manifest,
            Sources {
                flags: &flags,
                env: &env
            }
        ),
    );
    assert_eq!(failures(&from_manifest).len(), 4, "{from_manifest:?}");
    assert_eq!(failures(&from_env).len(), 3, "{from_env:?}");
    let failed = failures(&from_flags);
    assert_eq!(failed.len(), 2, "{from_flags:?}");
    assert_eq!(failed[1]["payload"]["status"], "exhausted");
    // The flags' 300 ms, not the manifest's 10 ms nor the default 1 s.
    let waited = gap(failed[0], failed[1]);
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(1),
        "{waited:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `rebuno-dev` with `args` and `env` to its exit: (status, stderr).
async fn refused(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_rebuno-dev"));
    for name in RETRY_VARIABLES {
        command.env_remove(name);
    }
    let run = command
        .args(args)
        .envs(env.iter().copied())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("rebuno-dev served instead of refusing")
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    (output.status.code().unwrap_or(-1), stderr)
}

#[tokio::test]
async fn rebuno_dev_refuses_retries_it_cannot_use_and_says_what_to_change() {
    let addr = free_port().to_string();
    let (code, err) = refused(&["--addr", &addr, "--dispatch-max-attempts", "0"], &[]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with("rebuno-dev: --dispatch-max-attempts is 0: a dispatch needs at least 1"),
        "{err}"
    );
    let (code, err) = refused(
        &["--addr", &addr],
        &[("REBUNO_DISPATCH_BASE_DELAY", "soon")],
    )
    .await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with("rebuno-dev: REBUNO_DISPATCH_BASE_DELAY \"soon\" is not a duration"),
        "{err}"
    );

    let dir = std::env::temp_dir().join(format!("rebuno-retry-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("manifest.yaml");
    std::fs::write(&path, "dispatch_base_delay: 40s\nagents: []\n").unwrap();
    let manifest = path.to_str().unwrap();
    let (code, err) = refused(&["--addr", &addr, "--config", manifest], &[]).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("the dispatch base delay (40s) is above the max delay (30s); lower the base"),
        "{err}"
    );
    // Raising the max delay is the fix the message names; a bad value in the file is named too.
    std::fs::write(&path, "dispatch_max_attempts: none\nagents: []\n").unwrap();
    let (code, err) = refused(&["--addr", &addr, "--config", manifest], &[]).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("invalid manifest: dispatch_max_attempts \"none\" is not a number"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
