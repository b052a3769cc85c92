//! The E2B driver (`E2bSandbox`, feature `e2b`) against the local E2B stand-in
//! (`tools/e2b-standin`, whose fidelity E2B's own Python SDK checks): the resource contract end to
//! end with the dev kernel (checkpoints every N and on completion, coverage reuse, forks of a
//! covered and of an uncovered point, a missing snapshot), a crash mid-step with the sandbox
//! surviving, pausing while blocked, and every request the driver sent checked against E2B's
//! published OpenAPI spec and envd protos.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;
use rebuno::wire::ExecutionStatus;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rebuno::client::Client;
use rebuno::resource::drivers::{E2bSandbox, Sandbox};
use rebuno::resource::{Checkpoints, DispatchEnd, resource};
use rebuno::wire::Execution;
use rebuno::{AgentBuilder, HandlerError, define_tool};
use rebuno_devkernel::{AgentSpec, DevKernel, EventKind, NewExecution};
use rebuno_e2b_standin::{E2bStandin, StandinConfig};
use serde_json::{Value, json};
use support::*;

/// The file each execution appends its lines to, relative to the sandbox's home.
const NOTES: &str = "notes.txt";

/// A stand-in on a fresh root, removed on drop.
struct Cloud {
    standin: Option<E2bStandin>,
    root: PathBuf,
}

impl Cloud {
    fn start(name: &str) -> Self {
        let root = std::env::temp_dir().join(format!("rebuno-e2b-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let standin = E2bStandin::start(StandinConfig::new(&root, "e2b_test_key")).unwrap();
        Self {
            standin: Some(standin),
            root,
        }
    }

    fn standin(&self) -> &E2bStandin {
        self.standin.as_ref().unwrap()
    }

    /// A driver pointed at the stand-in.
    fn driver(&self) -> E2bSandbox {
        let url = self.standin().url();
        E2bSandbox::new(self.standin().api_key())
            .api_url(url)
            .sandbox_url(url)
    }

    /// The sandbox's `notes.txt` as the stand-in holds it on disk.
    fn notes_on_disk(&self, sandbox_id: &str) -> String {
        let path = self
            .standin()
            .sandbox_fs(sandbox_id)
            .join("home/user")
            .join(NOTES);
        std::fs::read_to_string(path).unwrap_or_default()
    }

    /// The snapshot directories the stand-in holds.
    fn snapshots(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.standin().root().join("snapshots")) else {
            return Vec::new();
        };
        let mut names: Vec<_> = entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

impl Drop for Cloud {
    fn drop(&mut self) {
        drop(self.standin.take());
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// How the test agent behaves.
#[derive(Clone)]
struct Behaviour {
    driver: E2bSandbox,
    checkpoints: Checkpoints,
    /// While set, the handler hangs after its first append (the crash point).
    hang: Arc<AtomicBool>,
}

/// The lines in the sandbox's notes (none when the file is missing).
async fn lines(workspace: &Sandbox) -> Result<Vec<String>, HandlerError> {
    if !workspace.exists(NOTES).await? {
        return Ok(Vec::new());
    }
    let text = workspace.read_to_string(NOTES).await?;
    Ok(text.lines().map(str::to_owned).collect())
}

/// The agent: notes what its sandbox held at the start, appends each input line with a declared
/// tool (a read, then a write), counts the lines with a declared command, optionally deploys
/// (behind an approval when the policy says so), then notes what the sandbox holds.
fn writer(agent: AgentBuilder, behaviour: Behaviour) -> AgentBuilder {
    agent.handler_with_state(behaviour, |behaviour, input: Value| async move {
        let workspace = resource("workspace", behaviour.driver, behaviour.checkpoints).await?;
        let start = lines(&workspace).await?;
        let append = {
            let workspace = workspace.clone();
            define_tool("append")
                .resources(["workspace"])
                .execute(move |line: String| {
                    let workspace = workspace.clone();
                    async move {
                        let mut text = lines(&workspace).await?.join("\n");
                        text.push_str(&format!(
                            "{}{line}\n",
                            if text.is_empty() { "" } else { "\n" }
                        ));
                        workspace.write(NOTES, text).await?;
                        Ok::<_, HandlerError>(format!("appended {line}"))
                    }
                })
        };
        let count = {
            let workspace = workspace.clone();
            define_tool("count")
                .resources(["workspace"])
                .execute(move |_: Value| {
                    let workspace = workspace.clone();
                    async move {
                        let out = workspace.run(&format!("wc -l < {NOTES}")).await?;
                        Ok::<_, HandlerError>(out.stdout.trim().to_owned())
                    }
                })
        };
        for (n, line) in input["lines"].as_array().into_iter().flatten().enumerate() {
            append.call(line.as_str().unwrap().to_owned()).await?;
            if n == 0 && behaviour.hang.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
        }
        let counted = count.call(json!({})).await?;
        if input["deploy"] == true {
            let deploy = define_tool("deploy")
                .execute(|_: Value| async { Ok::<_, HandlerError>("deployed".to_owned()) });
            deploy.call(json!({ "to": "prod" })).await?;
        }
        Ok::<_, HandlerError>(json!({
            "sandbox": workspace.sandbox_id(),
            "start": start,
            "end": lines(&workspace).await?,
            "counted": counted,
        }))
    })
}

/// Serves the writer agent as `agent_id` with `behaviour`, registered under `policy` if any.
async fn serve_writer(
    kernel: &DevKernel,
    agent_id: &str,
    behaviour: Behaviour,
    policy: Option<&str>,
) -> Served {
    let built = writer(agent(kernel, agent_id), behaviour).build().unwrap();
    let served = serve(built).await;
    let mut spec = AgentSpec::new(agent_id, served.webhook_url(), SECRET);
    if let Some(policy) = policy {
        spec = spec.policy_yaml(policy);
    }
    kernel.register_agent(spec).unwrap();
    served
}

fn behaviour(cloud: &Cloud, checkpoints: Checkpoints) -> Behaviour {
    Behaviour {
        driver: cloud.driver(),
        checkpoints,
        hang: Arc::default(),
    }
}

fn completed(done: &Execution) -> Value {
    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "{}",
        done.failure_reason
    );
    done.output.clone().unwrap()
}

fn checkpointed(kernel: &DevKernel, done: &Execution) -> usize {
    kernel
        .events(&done.id)
        .iter()
        .filter(|e| e.kind == "resource.checkpointed")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_every_n_steps_and_on_completion_are_e2b_snapshots() {
    let _trace = trace_init();
    let cloud = Cloud::start("every");
    let kernel = DevKernel::start().await.unwrap();
    let served = serve_writer(
        &kernel,
        "writer",
        behaviour(&cloud, Checkpoints::every(2)),
        None,
    )
    .await;

    let done = run(&kernel, "writer", json!({ "lines": ["a", "b", "c", "d"] })).await;

    let output = completed(&done);
    assert_eq!(output["start"], json!([]));
    assert_eq!(output["end"], json!(["a", "b", "c", "d"]));
    assert_eq!(output["counted"], "4");
    let sandbox = output["sandbox"].as_str().unwrap();
    assert_eq!(cloud.notes_on_disk(sandbox), "a\nb\nc\nd\n");
    // The baseline, after the 2nd and the 4th append, and on completion: `count` (affecting,
    // the 5th step) ended the coverage of the 4th append's snapshot.
    assert_eq!(checkpointed(&kernel, &done), 4);
    assert_eq!(
        cloud.snapshots().len(),
        4,
        "one E2B snapshot per checkpoint"
    );
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coverage_reuse_keeps_a_snapshot_until_an_affecting_step() {
    let _trace = trace_init();
    let cloud = Cloud::start("reuse");
    let kernel = DevKernel::start().await.unwrap();
    let mut reusing = behaviour(&cloud, Checkpoints::every(1));
    reusing.driver = reusing.driver.with_coverage_reuse(true);
    let served = serve_writer(&kernel, "reuser", reusing, None).await;

    let done = run(&kernel, "reuser", json!({ "lines": ["a"] })).await;

    completed(&done);
    // The baseline, after `append`, after `count`; nothing on completion: `count` is the last
    // step and its snapshot still covers the sandbox.
    assert_eq!(checkpointed(&kernel, &done), 3);
    served.shutdown().await;
}

/// Runs `lines` through `agent_id`, then forks at the `nth` `step.succeeded` and waits for it.
async fn run_then_fork(kernel: &DevKernel, agent_id: &str, nth: usize) -> (Value, Value, Value) {
    let done = run(kernel, agent_id, json!({ "lines": ["a", "b", "c"] })).await;
    let output = completed(&done);
    let at = kernel
        .events(&done.id)
        .iter()
        .filter(|e| e.kind == "step.succeeded")
        .nth(nth)
        .unwrap()
        .event_seq;
    let client = Client::builder().base_url(kernel.url()).build().unwrap();
    let fork = client
        .fork(done.id.to_string(), at)
        .send()
        .await
        .expect("fork");
    let restoration = fork.restoration.clone().expect("restoration");
    let forked = client.wait(&fork.id, WAIT).await.expect("fork ends");
    assert_eq!(
        forked.status,
        ExecutionStatus::Completed,
        "{}",
        forked.failure_reason
    );
    (output, restoration, forked.output.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_of_a_covered_point_starts_a_new_sandbox_from_its_snapshot() {
    let _trace = trace_init();
    let cloud = Cloud::start("covered");
    let kernel = DevKernel::start().await.unwrap();
    let served = serve_writer(
        &kernel,
        "forker",
        behaviour(&cloud, Checkpoints::every(1)),
        None,
    )
    .await;

    // Fork right after the second append settled: its snapshot covers that point.
    let (first, restoration, forked) = run_then_fork(&kernel, "forker", 1).await;

    assert_eq!(restoration["workspace"]["covered"], true, "{restoration}");
    assert_eq!(
        forked["start"],
        json!(["a", "b"]),
        "restored from the snapshot"
    );
    assert_eq!(forked["end"], json!(["a", "b", "c"]));
    assert_ne!(forked["sandbox"], first["sandbox"], "a sandbox of its own");
    assert_eq!(
        cloud.notes_on_disk(first["sandbox"].as_str().unwrap()),
        "a\nb\nc\n",
        "the parent's sandbox is untouched"
    );
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_of_an_uncovered_point_starts_from_the_newest_earlier_snapshot() {
    let _trace = trace_init();
    let cloud = Cloud::start("uncovered");
    let kernel = DevKernel::start().await.unwrap();
    let served = serve_writer(
        &kernel,
        "skipper",
        behaviour(&cloud, Checkpoints::every(2)),
        None,
    )
    .await;

    // After the first append: only the (empty) baseline was captured before it.
    let (_, restoration, forked) = run_then_fork(&kernel, "skipper", 0).await;

    assert_eq!(restoration["workspace"]["covered"], false, "{restoration}");
    assert_eq!(
        forked["start"],
        json!([]),
        "the baseline's empty sandbox, while the recorded append replays as copied"
    );
    assert_eq!(forked["end"], json!(["b", "c"]));
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_whose_snapshot_is_gone_fails_with_checkpoint_unavailable() {
    let _trace = trace_init();
    let cloud = Cloud::start("gone");
    let kernel = DevKernel::start().await.unwrap();
    let served = serve_writer(
        &kernel,
        "loser",
        behaviour(&cloud, Checkpoints::every(1)),
        None,
    )
    .await;
    let done = run(&kernel, "loser", json!({ "lines": ["a"] })).await;
    completed(&done);
    let at = kernel
        .events(&done.id)
        .iter()
        .find(|e| e.kind == "step.succeeded")
        .unwrap()
        .event_seq;
    // The snapshots are deleted (what E2B's `Sandbox.delete_snapshot` does).
    for reference in checkpoint_refs(&kernel, &done.id) {
        let deleted = reqwest::Client::new()
            .delete(format!("{}/templates/{reference}", cloud.standin().url()))
            .header("X-API-Key", cloud.standin().api_key())
            .send()
            .await
            .unwrap();
        assert_eq!(deleted.status(), 204, "{reference}");
    }

    let client = Client::builder().base_url(kernel.url()).build().unwrap();
    let fork = client.fork(done.id.to_string(), at).send().await.unwrap();
    let forked = client.wait(&fork.id, WAIT).await.unwrap();

    assert_eq!(forked.status, ExecutionStatus::Failed);
    assert!(
        forked
            .failure_reason
            .starts_with("agent_error: CheckpointUnavailable"),
        "{}",
        forked.failure_reason
    );
    served.shutdown().await;
}

/// The checkpoint references (E2B snapshot ids) recorded for execution `id`.
fn checkpoint_refs(kernel: &DevKernel, id: &str) -> Vec<String> {
    kernel
        .events(id)
        .iter()
        .filter(|e| e.kind == "resource.checkpointed")
        .map(|e| e.payload["checkpoint_ref"].as_str().unwrap().to_owned())
        .collect()
}

/// Serves the writer on its own runtime in its own thread, like a separate process.
fn spawn_process(kernel_url: String, behaviour: Behaviour) -> (String, tokio::runtime::Runtime) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let addr = runtime.block_on(async move {
        let agent = writer(
            rebuno::Agent::builder("survivor")
                .secret(SECRET)
                .base_url(kernel_url),
            behaviour,
        )
        .build()
        .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(std::future::IntoFuture::into_future(rebuno_hyper::serve(
            listener, agent,
        )));
        addr
    });
    (format!("http://{addr}/webhook"), runtime)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_crash_mid_run_the_next_delivery_reopens_the_same_sandbox() {
    let _trace = trace_init();
    let cloud = Cloud::start("crash");
    let kernel = DevKernel::start().await.unwrap();
    let crashing = behaviour(&cloud, Checkpoints::never());
    crashing.hang.store(true, Ordering::SeqCst);
    let first = {
        let (kernel_url, crashing) = (kernel.url(), crashing.clone());
        std::thread::spawn(move || spawn_process(kernel_url, crashing))
            .join()
            .unwrap()
    };
    kernel
        .register_agent(AgentSpec::new("survivor", &first.0, SECRET))
        .unwrap();
    let created = kernel
        .create_execution(NewExecution::new(
            "survivor",
            json!({ "lines": ["a", "b"] }),
        ))
        .await
        .unwrap();
    kernel
        .wait_for_event(&created.id, EventKind::StepSucceeded, WAIT)
        .await
        .unwrap();

    // Crash: every task of the first process dies mid-run, without a goodbye.
    first.1.shutdown_background();
    crashing.hang.store(false, Ordering::SeqCst);
    let second = {
        let (kernel_url, going) = (kernel.url(), crashing.clone());
        std::thread::spawn(move || spawn_process(kernel_url, going))
            .join()
            .unwrap()
    };
    kernel
        .register_agent(AgentSpec::new("survivor", &second.0, SECRET))
        .unwrap();
    kernel.redeliver(&created.id).unwrap();
    let done = kernel.wait_terminal(&created.id, WAIT).await.unwrap();

    let output = completed(&done);
    assert_eq!(
        output["start"],
        json!(["a"]),
        "the sandbox kept the first append"
    );
    assert_eq!(
        output["end"],
        json!(["a", "b"]),
        "and the recorded append did not run again"
    );
    let sandboxes = std::fs::read_dir(cloud.standin().root().join("sandboxes"))
        .unwrap()
        .count();
    assert_eq!(sandboxes, 1, "reopened, not created again");
    second.1.shutdown_background();
}

const ASK_BEFORE_DEPLOY: &str = "default_action: allow\nrules:\n  - id: ask-first\n    when: { target: deploy }\n    then: { decision: require_approval }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_execution_pauses_its_sandbox_and_the_next_delivery_resumes_it() {
    let _trace = trace_init();
    let cloud = Cloud::start("pause");
    let kernel = DevKernel::start().await.unwrap();
    let mut pausing = behaviour(&cloud, Checkpoints::never());
    pausing.driver = pausing.driver.pause_while_waiting(true);
    let served = serve_writer(&kernel, "pauser", pausing, Some(ASK_BEFORE_DEPLOY)).await;
    let created = kernel
        .create_execution(NewExecution::new(
            "pauser",
            json!({ "lines": ["a"], "deploy": true }),
        ))
        .await
        .unwrap();
    kernel
        .wait_until(&created.id, WAIT, |s| s == ExecutionStatus::Blocked)
        .await
        .unwrap();

    let sandbox = only_sandbox(&cloud);
    assert_eq!(
        state(&cloud, &sandbox, "paused").await,
        "paused",
        "paused while blocked"
    );

    let approval = kernel.approvals().pop().expect("an approval waits");
    kernel.grant(&approval.id).unwrap();
    let done = kernel.wait_terminal(&created.id, WAIT).await.unwrap();

    let output = completed(&done);
    assert_eq!(output["sandbox"], sandbox.as_str());
    assert_eq!(output["end"], json!(["a"]));
    assert_eq!(
        state(&cloud, &sandbox, "running").await,
        "running",
        "resumed by the next delivery"
    );
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_when_done_deletes_the_sandbox_once_the_execution_completed() {
    let _trace = trace_init();
    let cloud = Cloud::start("kill");
    let kernel = DevKernel::start().await.unwrap();
    let mut killing = behaviour(&cloud, Checkpoints::every(1));
    killing.driver = killing.driver.kill_when_done(true);
    let served = serve_writer(&kernel, "killer", killing, None).await;

    let done = run(&kernel, "killer", json!({ "lines": ["a"] })).await;

    let output = completed(&done);
    let sandbox = output["sandbox"].as_str().unwrap();
    assert_eq!(
        state(&cloud, sandbox, "").await,
        "",
        "killed after the completion"
    );
    assert_eq!(
        checkpointed(&kernel, &done),
        3,
        "its snapshots were taken before"
    );
    served.shutdown().await;
}

/// The id of the one sandbox the stand-in holds.
fn only_sandbox(cloud: &Cloud) -> String {
    let mut ids: Vec<String> = std::fs::read_dir(cloud.standin().root().join("sandboxes"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    ids.pop().unwrap()
}

/// A sandbox's `state` as E2B's `GET /sandboxes/{id}` reports it, once it is `want` or after
/// two seconds (the pause happens after the blocked dispatch recorded its block).
async fn state(cloud: &Cloud, sandbox: &str, want: &str) -> String {
    let mut last = Value::Null;
    for _ in 0..200 {
        last = reqwest::Client::new()
            .get(format!("{}/sandboxes/{sandbox}", cloud.standin().url()))
            .header("X-API-Key", cloud.standin().api_key())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if last["state"].as_str().unwrap_or_default() == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    last["state"].as_str().unwrap_or_default().to_owned()
}

/// The official SDK's venv (`tools/e2b-standin/requirements.txt`), shared with the stand-in's
/// own tests.
#[path = "../../tools/e2b-standin/tests/support/venv.rs"]
mod e2b_venv;

/// Every call the driver and its handle make, straight through the `ResourceDriver` trait.
async fn workout(cloud: &Cloud) {
    use rebuno::resource::ResourceDriver;
    use rebuno::resource::drivers::{E2bErrorKind, RunOptions};
    let driver = cloud.driver().pause_while_waiting(true);
    let (sandbox, binding) = driver.create(None).await.unwrap();
    sandbox.make_dir("src").await.unwrap();
    sandbox
        .write("src/lib.rs", "pub fn one() -> u32 { 1 }\n")
        .await
        .unwrap();
    assert_eq!(
        sandbox.read_to_string("src/lib.rs").await.unwrap(),
        "pub fn one() -> u32 { 1 }\n"
    );
    let names: Vec<_> = sandbox
        .list("src")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["lib.rs"]);
    let out = sandbox.run("cat src/lib.rs >&2; exit 3").await.unwrap();
    assert_eq!(
        (out.exit_code, out.stderr.as_str()),
        (3, "pub fn one() -> u32 { 1 }\n")
    );
    let slow = RunOptions::new().timeout(Duration::from_millis(500));
    let timed_out = sandbox.run_with("sleep 30", slow).await.unwrap_err();
    assert_eq!(timed_out.kind(), E2bErrorKind::Timeout, "{timed_out}");
    assert!(timed_out.to_string().contains("\"sleep …\""), "{timed_out}");
    // The timed-out command's children die with it (envd signals only the process; the driver
    // kills its group).
    let orphaned = RunOptions::new().timeout(Duration::from_millis(500));
    let script = "sleep 300 & echo $! > child.pid; wait";
    let orphaned = sandbox.run_with(script, orphaned).await.unwrap_err();
    // Alive: its /proc entry exists and is not a zombie (a killed orphan may stay one here,
    // where nothing reaps it).
    let check = "st=$(awk '/^State/{print $2}' /proc/$(cat child.pid)/status 2>/dev/null); \
                 [ -n \"$st\" ] && [ \"$st\" != Z ]";
    let alive = sandbox.run(check).await.unwrap();
    assert_ne!(
        alive.exit_code, 0,
        "the child of a timed-out command still runs: {orphaned}"
    );

    let snapshot = driver.checkpoint(&sandbox).await.unwrap();
    sandbox.remove("src/lib.rs").await.unwrap();
    assert!(
        !sandbox.exists("src/lib.rs").await.unwrap(),
        "the handle works after a checkpoint"
    );
    let (restored, _) = driver.create(Some(&snapshot)).await.unwrap();
    assert!(
        restored.exists("src/lib.rs").await.unwrap(),
        "the snapshot kept the file"
    );

    driver
        .release(
            &sandbox,
            DispatchEnd::Suspended(rebuno::Suspension::Blocked),
        )
        .await
        .unwrap();
    let binding = serde_json::from_value(serde_json::to_value(binding).unwrap()).unwrap();
    let reopened = driver.open(binding).await.unwrap();
    assert!(!reopened.exists("src/lib.rs").await.unwrap());
    reopened.kill().await.unwrap();
    restored.kill().await.unwrap();

    let refused = E2bSandbox::new("e2b_wrong_key")
        .api_url(cloud.standin().url())
        .sandbox_url(cloud.standin().url())
        .create(None)
        .await
        .err()
        .unwrap();
    let refused = refused
        .downcast_ref::<rebuno::resource::drivers::E2bError>()
        .unwrap();
    assert_eq!(refused.kind(), E2bErrorKind::Unauthorized);
    assert!(!refused.to_string().contains("e2b_wrong_key"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_the_driver_sends_fits_e2bs_published_spec() {
    let _trace = trace_init();
    let cloud = Cloud::start("spec");
    workout(&cloud).await;
    let captured = cloud.standin().captured();
    let capture = cloud.root.join("capture.jsonl");
    let lines: Vec<String> = captured.iter().map(Value::to_string).collect();
    std::fs::write(&capture, lines.join("\n") + "\n").unwrap();

    let script = e2b_venv::crate_dir().join("validate.py");
    let out = std::process::Command::new(e2b_venv::python())
        .arg(&script)
        .arg(&capture)
        .output()
        .unwrap();

    assert!(
        out.status.success(),
        "validate.py found requests outside the spec (no /v2 allowed):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(captured.len() >= 15, "{} requests", captured.len());
}
