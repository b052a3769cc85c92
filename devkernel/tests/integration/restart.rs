//! `rebuno-dev --data-dir` survives its own death: the kernel process is SIGKILLed while an
//! SDK agent is halfway through its steps, restarted on the same directory and port, and
//! the execution resumes and completes. Nothing the killed kernel recorded is lost, and no
//! step it recorded runs again.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rebuno::{Agent, HandlerError, Step};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::common::{SECRET, client};

const STEPS: u32 = 12;
/// How many steps must be recorded before the kill.
const KILL_AFTER: usize = 4;

/// The agent: `STEPS` local steps in a row, each noting that its body ran.
fn counter(kernel: &str, runs: Arc<Mutex<Vec<u32>>>) -> Agent {
    Agent::builder("counter")
        .base_url(kernel)
        .secret(SECRET)
        .handler(move |steps: u32| {
            let runs = runs.clone();
            async move {
                let mut total = 0;
                for i in 0..steps {
                    let runs = runs.clone();
                    total += Step::new(format!("step-{i}"))
                        .run(|| async move {
                            runs.lock().unwrap().push(i);
                            tokio::time::sleep(Duration::from_millis(40)).await;
                            Ok::<_, HandlerError>(i)
                        })
                        .await?;
                }
                Ok::<_, HandlerError>(total)
            }
        })
        .build()
        .unwrap()
}

/// `rebuno-dev serve` on `addr` with the event log in `dir`.
fn rebuno_dev(addr: SocketAddr, dir: &Path, manifest: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_rebuno-dev"))
        .args(["serve", "--addr", &addr.to_string(), "--config"])
        .arg(manifest)
        .arg("--data-dir")
        .arg(dir)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

async fn wait_ready(url: &str) {
    for _ in 0..300 {
        if let Ok(response) = reqwest::get(format!("{url}/v0/agents")).await
            && response.status().is_success()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("rebuno-dev did not come up at {url}");
}

async fn events(url: &str, id: &str) -> Vec<Value> {
    let (status, events) = client(
        "GET",
        &format!("{url}/v0/executions/{id}/events?limit=1000"),
        None,
        None,
    )
    .await;
    assert_eq!(status, 200, "{events}");
    events.as_array().unwrap().clone()
}

fn succeeded_steps(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "step.succeeded")
        .map(|e| e["payload"]["target"].as_str().unwrap().to_owned())
        .collect()
}

async fn wait_until(url: &str, id: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    for _ in 0..1000 {
        let log = events(url, id).await;
        if done(&log) {
            return log;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("gave up waiting on {id}: {:?}", events(url, id).await);
}

fn kill(child: &mut Child) {
    child.kill().unwrap(); // SIGKILL on Unix: no shutdown hook runs
    child.wait().unwrap();
}

fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

struct Dirs {
    data: PathBuf,
    manifest: PathBuf,
}

fn dirs(webhook: &str) -> Dirs {
    let root = std::env::temp_dir().join(format!("rebuno-restart-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&root).unwrap();
    let manifest = root.join("agents.yaml");
    let yaml =
        format!("agents:\n  - id: counter\n    webhook_url: {webhook}\n    secret: {SECRET}\n");
    std::fs::write(&manifest, yaml).unwrap();
    Dirs {
        data: root.join("data"),
        manifest,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_kernel_restarts_from_its_log_and_the_execution_completes_once() {
    let addr = free_port();
    let url = format!("http://{addr}");
    let runs = Arc::new(Mutex::new(Vec::new()));
    let agent = counter(&url, runs.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let webhook = format!(
        "http://{}{}",
        listener.local_addr().unwrap(),
        agent.webhook_path()
    );
    let server = tokio::spawn(rebuno_hyper::serve(listener, agent).into_future());
    let dirs = dirs(&webhook);

    let mut kernel = rebuno_dev(addr, &dirs.data, &dirs.manifest);
    wait_ready(&url).await;
    let body = json!({"agent_id": "counter", "input": STEPS}).to_string();
    let (status, created) =
        client("POST", &format!("{url}/v0/executions"), None, Some(&body)).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();

    // Halfway: read what the kernel recorded, then kill it without warning.
    let before = wait_until(&url, &id, |log| succeeded_steps(log).len() >= KILL_AFTER).await;
    kill(&mut kernel);
    let mut kernel = rebuno_dev(addr, &dirs.data, &dirs.manifest);
    wait_ready(&url).await;

    let after = wait_until(&url, &id, |log| {
        log.iter().any(|e| e["type"] == "execution.completed")
    })
    .await;
    let completed = after
        .iter()
        .find(|e| e["type"] == "execution.completed")
        .unwrap();
    assert_eq!(
        completed["payload"]["output"],
        json!((0..STEPS).sum::<u32>())
    );

    // Nothing recorded before the kill is lost or changed.
    assert_eq!(
        after[..before.len()],
        before[..],
        "the log lost or rewrote events"
    );
    // The restart reclaimed the in-flight dispatch visibly.
    assert!(
        after[before.len()..]
            .iter()
            .any(|e| e["type"] == "dispatch.reclaimed" && e["payload"]["error"] == "kernel_restart"),
        "{after:?}"
    );
    // Every step succeeded once; a step recorded before the kill never ran again.
    assert_eq!(succeeded_steps(&after).len(), STEPS as usize);
    let runs = runs.lock().unwrap().clone();
    for target in succeeded_steps(&before) {
        let i: u32 = target.trim_start_matches("step-").parse().unwrap();
        assert_eq!(
            runs.iter().filter(|r| **r == i).count(),
            1,
            "{target} ran again: {runs:?}"
        );
    }
    assert!(
        runs.len() <= STEPS as usize + 1,
        "more than the in-flight step re-ran: {runs:?}"
    );

    // A second restart rebuilds the same projections from the same log.
    let get = |path: String| async move { client("GET", &path, None, None).await.1 };
    let execution = get(format!("{url}/v0/executions/{id}")).await;
    let steps = get(format!("{url}/v0/executions/{id}/steps")).await;
    kill(&mut kernel);
    let mut kernel = rebuno_dev(addr, &dirs.data, &dirs.manifest);
    wait_ready(&url).await;
    assert_eq!(get(format!("{url}/v0/executions/{id}")).await, execution);
    assert_eq!(get(format!("{url}/v0/executions/{id}/steps")).await, steps);
    assert_eq!(events(&url, &id).await, after);

    kill(&mut kernel);
    server.abort();
    let _ = std::fs::remove_dir_all(dirs.data.parent().unwrap());
}
