//! `rebuno-dev --data-dir` survives its own death: the kernel process is SIGKILLed while an
//! SDK agent is halfway through its steps, restarted on the same directory and port, and
//! the execution completes under the agent's first attempt: the lease outlived the kernel.
//! Nothing the killed kernel recorded is lost, and no step runs twice. (`restart_leases`
//! checks the lease rules themselves: kept when live, reclaimed when expired.)
//!
//! Agents and API keys survive too (`DIR/registry.jsonl`): registered over HTTP on a kernel
//! without a manifest, then SIGKILLed; rotated, changed and deleted on an in-process
//! kernel, then restarted.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rebuno::{Agent, HandlerError, Step};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use rebuno_devkernel::{AgentSpec, DevKernel};

use crate::common::{AgentClient, SECRET, client};

const STEPS: u32 = 12;
/// How many steps must be recorded before the kill.
const KILL_AFTER: usize = 4;

/// The agent: `STEPS` local steps in a row, each noting that its body ran; the body of step
/// `KILL_AFTER` waits for `hold`, so the kernel is killed while no request of the agent is in
/// flight (a request the kill cuts is one the agent cannot know the fate of: it ends its run and
/// the execution waits for the lease to expire, which is the protocol but not this test).
fn counter(kernel: &str, runs: Arc<Mutex<Vec<u32>>>, hold: Arc<tokio::sync::Semaphore>) -> Agent {
    Agent::builder("counter")
        .base_url(kernel)
        .secret(SECRET)
        .handler(move |steps: u32| {
            let (runs, hold) = (runs.clone(), hold.clone());
            async move {
                let mut total = 0;
                for i in 0..steps {
                    let (runs, hold) = (runs.clone(), hold.clone());
                    total += Step::new(format!("step-{i}"))
                        .run(|| async move {
                            runs.lock().unwrap().push(i);
                            if i == KILL_AFTER as u32 {
                                hold.acquire().await?.forget();
                            }
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
    spawn_rebuno_dev(addr, dir, Some(manifest))
}

/// `rebuno-dev serve` on `addr` with its data in `dir`, provisioned from `manifest` if any.
pub(crate) fn spawn_rebuno_dev(addr: SocketAddr, dir: &Path, manifest: Option<&Path>) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rebuno-dev"));
    command.args(["serve", "--addr", &addr.to_string()]);
    if let Some(manifest) = manifest {
        command.arg("--config").arg(manifest);
    }
    command
        .arg("--data-dir")
        .arg(dir)
        .env(
            "RUST_LOG",
            std::env::var("REBUNO_TEST_KERNEL_LOG").unwrap_or_else(|_| "warn".to_owned()),
        )
        .stdout(Stdio::null())
        .stderr(if std::env::var_os("REBUNO_TEST_KERNEL_LOG").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .spawn()
        .unwrap()
}

pub(crate) async fn wait_ready(url: &str) {
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

pub(crate) async fn events(url: &str, id: &str) -> Vec<Value> {
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

/// Waits for the execution to complete; its log and its output.
async fn completion(url: &str, id: &str) -> (Vec<Value>, Value) {
    let completed = |e: &Value| e["type"] == "execution.completed";
    let log = wait_until(url, id, |log| log.iter().any(completed)).await;
    let output = log.iter().find(|e| completed(e)).unwrap()["payload"]["output"].clone();
    (log, output)
}

pub(crate) fn kill(child: &mut Child) {
    child.kill().unwrap(); // SIGKILL on Unix: no shutdown hook runs
    child.wait().unwrap();
}

pub(crate) fn free_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], crate::ports::free_port()))
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
    let hold = Arc::new(tokio::sync::Semaphore::new(0));
    let agent = counter(&url, runs.clone(), hold.clone());
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

    // Halfway, with the agent inside a step's body: read what the kernel recorded, then kill
    // it without warning; the body goes on once the kernel is back.
    while !runs.lock().unwrap().contains(&(KILL_AFTER as u32)) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let before = events(&url, &id).await;
    assert_eq!(succeeded_steps(&before).len(), KILL_AFTER);
    kill(&mut kernel);
    let mut kernel = rebuno_dev(addr, &dirs.data, &dirs.manifest);
    wait_ready(&url).await;
    hold.add_permits(1);

    let (after, output) = completion(&url, &id).await;
    assert_eq!(output, json!((0..STEPS).sum::<u32>()));

    // Nothing recorded before the kill is lost or changed.
    assert_eq!(
        after[..before.len()],
        before[..],
        "the log lost or rewrote events"
    );
    // The agent was alive all along: its lease survived the restart (as the Go kernel's
    // leases do, rows with an expiry), so nothing was reclaimed or delivered again, and the
    // run that was under way finished under its first attempt.
    let reclaims: Vec<_> = after
        .iter()
        .filter(|e| e["type"] == "dispatch.reclaimed")
        .collect();
    assert!(reclaims.is_empty(), "reclaimed: {reclaims:?}");
    let deliveries = after
        .iter()
        .filter(|e| e["type"] == "dispatch.acked")
        .count();
    assert_eq!(deliveries, 1, "{after:?}");
    // Every step succeeded and ran exactly once.
    assert_eq!(succeeded_steps(&after).len(), STEPS as usize);
    let mut runs = runs.lock().unwrap().clone();
    runs.sort_unstable();
    assert_eq!(runs, (0..STEPS).collect::<Vec<_>>(), "a step ran twice");

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

/// The secret of the agent the registry test registers over HTTP (not the manifest's).
const REGISTERED_SECRET: &str = "registered-over-http";

/// An SDK agent greeting its input after one recorded step.
fn greeter(kernel: &str) -> Agent {
    Agent::builder("greeter")
        .base_url(kernel)
        .secret(REGISTERED_SECRET)
        .handler(|name: String| async move {
            let greeting = Step::new("greet")
                .run(|| async move { Ok::<_, HandlerError>(format!("hello, {name}")) })
                .await?;
            Ok::<_, HandlerError>(greeting)
        })
        .build()
        .unwrap()
}

/// `GET /v0/agents` with an API key: the status alone.
async fn agents_status(url: &str, token: &str) -> u16 {
    client("GET", &format!("{url}/v0/agents"), Some(token), None)
        .await
        .0
}

/// Creates an API key named `name`: (id, token).
async fn create_key(url: &str, name: &str) -> (String, String) {
    let body = json!({"name": name, "scopes": ["agents:read", "executions:read"]}).to_string();
    let (status, key) = client("POST", &format!("{url}/v0/api-keys"), None, Some(&body)).await;
    assert_eq!(status, 201, "{key}");
    let id = key["id"].as_str().unwrap().to_owned();
    (id, key["token"].as_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_and_api_keys_registered_over_http_survive_a_sigkill() {
    let addr = free_port();
    let url = format!("http://{addr}");
    let agent = greeter(&url);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let webhook = format!(
        "http://{}{}",
        listener.local_addr().unwrap(),
        agent.webhook_path()
    );
    let server = tokio::spawn(rebuno_hyper::serve(listener, agent).into_future());
    let root = std::env::temp_dir().join(format!("rebuno-registry-{}", uuid::Uuid::now_v7()));
    let data = root.join("data");

    // No manifest: everything the kernel knows comes over HTTP.
    let mut kernel = spawn_rebuno_dev(addr, &data, None);
    wait_ready(&url).await;
    let body = json!({
        "id": "greeter",
        "webhook_url": webhook,
        "secret": REGISTERED_SECRET,
        "lease_timeout_seconds": 30,
    })
    .to_string();
    let (status, registered) = client("POST", &format!("{url}/v0/agents"), None, Some(&body)).await;
    assert_eq!(status, 201, "{registered}");
    let bundle = json!({"bundle": "default_action: allow"}).to_string();
    let (status, _) = client(
        "POST",
        &format!("{url}/v0/policies/greeter"),
        None,
        Some(&bundle),
    )
    .await;
    assert!((200..300).contains(&status), "{status}");
    let (revoked_id, revoked) = create_key(&url, "old").await;
    let (status, _) = client(
        "DELETE",
        &format!("{url}/v0/api-keys/{revoked_id}"),
        None,
        None,
    )
    .await;
    assert_eq!(status, 204);
    let (_, live) = create_key(&url, "live").await;
    assert_eq!(agents_status(&url, &live).await, 200);
    assert_eq!(agents_status(&url, &revoked).await, 401);
    let (_, agents) = client("GET", &format!("{url}/v0/agents"), None, None).await;
    assert_eq!(
        agents[0]["policy_bundle"], "default_action: allow",
        "{agents}"
    );
    let (_, keys) = client("GET", &format!("{url}/v0/api-keys"), None, None).await;

    kill(&mut kernel);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let registry = std::fs::metadata(data.join("registry.jsonl")).unwrap();
        assert_eq!(registry.permissions().mode() & 0o777, 0o600);
    }
    let mut kernel = spawn_rebuno_dev(addr, &data, None);
    wait_ready(&url).await;

    // The same agent and keys, the live key still good, the revoked one still refused.
    let (_, after) = client("GET", &format!("{url}/v0/agents"), None, None).await;
    assert_eq!(after, agents);
    assert_eq!(after.as_array().unwrap().len(), 1);
    let (_, keys_after) = client("GET", &format!("{url}/v0/api-keys"), None, None).await;
    assert_eq!(keys_after, keys);
    assert_eq!(agents_status(&url, &live).await, 200);
    assert_eq!(agents_status(&url, &revoked).await, 401);

    // The recovered secret signs the webhook (the SDK agent checks it) and verifies the
    // agent's own signed calls: the execution completes without a failed delivery.
    let body = json!({"agent_id": "greeter", "input": "Ada"}).to_string();
    let (status, created) =
        client("POST", &format!("{url}/v0/executions"), None, Some(&body)).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let (log, output) = completion(&url, &id).await;
    assert_eq!(output, json!("hello, Ada"));
    assert!(
        !log.iter().any(|e| e["type"] == "dispatch.failed"),
        "{log:?}"
    );

    kill(&mut kernel);
    server.abort();
    let _ = std::fs::remove_dir_all(root);
}

/// An agent client for `hello` signing with `secret`.
fn signed(url: &str, secret: &str) -> AgentClient {
    let mut api = AgentClient::new(url);
    api.secret = rebuno::Secret::new(secret);
    api
}

/// `PUT /v0/agents/hello/metadata` signed with `secret`: the status.
async fn publish(url: &str, secret: &str, metadata: &str) -> u16 {
    signed(url, secret)
        .send("PUT", "/v0/agents/hello/metadata", None, metadata)
        .await
        .0
}

#[tokio::test]
async fn rotations_metadata_policies_and_deletions_survive_a_restart() {
    let dir = std::env::temp_dir().join(format!("rebuno-registry-{}", uuid::Uuid::now_v7()));
    let start = || DevKernel::builder().data_dir(&dir).start();
    let kernel = start().await.unwrap();
    let url = kernel.url();
    kernel
        .register_agent(AgentSpec::new("hello", "http://127.0.0.1:9/webhook", "one"))
        .unwrap();
    kernel
        .register_agent(AgentSpec::new("gone", "http://127.0.0.1:9/webhook", SECRET))
        .unwrap();
    kernel.rotate_secret("hello", "two").unwrap();
    kernel.set_policy("hello", "default_action: allow").unwrap();
    let metadata = r#"{"description": "greets", "input_schema": {"type": "string"}}"#;
    assert_eq!(publish(&url, "two", metadata).await, 204);
    let (status, _) = client("DELETE", &format!("{url}/v0/agents/gone"), None, None).await;
    assert_eq!(status, 204);
    let (_, agents) = client("GET", &format!("{url}/v0/agents"), None, None).await;
    kernel.shutdown().await;

    // One agent, as it was, accepting both the rotated secret and the one it replaced.
    let kernel = start().await.unwrap();
    let url = kernel.url();
    let (_, after) = client("GET", &format!("{url}/v0/agents"), None, None).await;
    assert_eq!(after, agents);
    assert_eq!(after.as_array().unwrap().len(), 1, "{after}");
    assert_eq!(after[0]["description"], "greets");
    assert_eq!(after[0]["input_schema"], json!({"type": "string"}));
    assert_eq!(after[0]["policy_bundle"], "default_action: allow");
    assert_eq!(publish(&url, "one", metadata).await, 204);
    assert_eq!(publish(&url, "two", metadata).await, 204);
    kernel.retire_previous_secret("hello").unwrap();
    kernel.shutdown().await;

    // Retiring the previous secret is persisted too.
    let kernel = start().await.unwrap();
    let url = kernel.url();
    assert_eq!(publish(&url, "one", metadata).await, 401);
    assert_eq!(publish(&url, "two", metadata).await, 204);
    kernel.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}
