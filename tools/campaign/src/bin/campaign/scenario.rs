//! Deterministic scenarios around one process receiving the same attempt twice.
//!
//! * `repeat-after-deadline`: attempt 1 is delivered with a host deadline, so the run yields and
//!   ends while its lease is live; then the same attempt is delivered again to the same process.
//! * `stale-dispatch-then-repeat` (what the campaign found with seeds 11 and 22): the execution
//!   blocks on an approval (dispatch D1 retired) and resumes as dispatch D2; while D2's run is
//!   live, D1's old webhook arrives again (it supersedes D2's run in the registry), then D2's
//!   webhook arrives again (it runs a second time). The second run re-submits the recorded steps,
//!   the kernel counts them as new occurrences, and the at-most-once effect runs twice.
//!
//! If the process runs an attempt a second time, the kernel counts the re-submitted recorded
//! steps as new occurrences and the at-most-once effect runs twice.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rebuno_campaign::{DEADLINE_HEADER, Op, Program};

use crate::agents::{self, Slot};
use crate::kernel::KernelHandle;
use crate::verify::read_effects;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What the capture endpoint keeps: each webhook's body and signature, in arrival order.
type Captured = Arc<Mutex<Vec<(Bytes, String)>>>;

/// A webhook endpoint that keeps what the kernel sends and delivers nothing.
async fn capture() -> std::io::Result<(String, Captured)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/webhook", listener.local_addr()?);
    let kept: Captured = Arc::default();
    let store = Arc::clone(&kept);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let store = Arc::clone(&store);
            let service =
                hyper::service::service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let store = Arc::clone(&store);
                    async move {
                        let signature = request
                            .headers()
                            .get("rebuno-signature")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_owned();
                        let body = request
                            .into_body()
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        if let Ok(mut kept) = store.lock() {
                            kept.push((body, signature));
                        }
                        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                            Bytes::new(),
                        )))
                    }
                });
            tokio::spawn(async move {
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok((url, kept))
}

/// The kernel (its webhook the capture endpoint) and one agent slot, started in `workdir`;
/// and what the capture endpoint keeps.
async fn start(workdir: &Path) -> Result<(KernelHandle, Arc<Slot>, Captured), BoxError> {
    let (url, kept) = capture().await?;
    let binaries = agents::binaries()?;
    let ports = agents::free_ports(4)?;
    let kernel = KernelHandle::start(&binaries.kernel, workdir, (ports[2], ports[3]), url).await?;
    let slot = Slot::new(
        0,
        (ports[0], ports[1]),
        kernel.url(),
        &binaries.agent,
        workdir,
    )?;
    Ok((kernel, slot, kept))
}

async fn post(port: u16, body: &Bytes, signature: &str, deadline: Option<u64>) -> Option<u16> {
    let mut request = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/webhook"))
        .header("content-type", "application/json")
        .header("rebuno-signature", signature)
        .body(body.clone());
    if let Some(ms) = deadline {
        request = request.header(DEADLINE_HEADER, ms.to_string());
    }
    request.send().await.ok().map(|r| r.status().as_u16())
}

/// The scenario's working directory (the kernel's data, the agent's logs, the effect log),
/// created; one per driver process.
fn scenario_workdir() -> std::io::Result<PathBuf> {
    let workdir =
        std::env::temp_dir().join(format!("rebuno-campaign-scenario-{}", std::process::id()));
    std::fs::create_dir_all(&workdir)?;
    Ok(workdir)
}

/// The `n`-th webhook the capture endpoint kept (body and signature), waiting for it up to
/// `tries` times 20 ms; `None` when it never came.
async fn captured(kept: &Captured, n: usize, tries: usize) -> Option<(Bytes, String)> {
    for _ in 0..tries {
        if let Some(hook) = kept.lock().ok().and_then(|k| k.get(n).cloned()) {
            return Some(hook);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Delivers a captured webhook to the agent's `port` (with a host deadline of `deadline` ms if
/// any) and prints `what` with the agent's answer.
async fn deliver(
    what: &str,
    port: u16,
    (body, signature): &(Bytes, String),
    deadline: Option<u64>,
) {
    println!(
        "{what} -> {:?}",
        post(port, body, signature, deadline).await
    );
}

/// Grants the first approval the execution requests, waiting for it up to 200 times 20 ms.
async fn grant_first_approval(kernel: &KernelHandle) -> Result<(), BoxError> {
    for _ in 0..200 {
        if let Some(approval) = kernel.approvals().await.first() {
            kernel
                .grant(&approval.id)
                .await
                .ok_or("the grant did not reach the kernel")?;
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err("no approval requested".into())
}

/// Prints the execution's event log, one event a line.
async fn print_events(kernel: &KernelHandle, execution: &str) {
    for event in kernel.events(execution).await.unwrap_or_default() {
        println!(
            "    {:>3} {:<22} {}",
            event.event_seq, event.kind, event.payload
        );
    }
}

/// Reads the effect log in `workdir` now; returns how many times each op of `execution` ran.
fn effect_counter(workdir: &Path, execution: &str) -> impl Fn(u32) -> usize {
    let (effects, _, _) = read_effects(&workdir.join("effects.jsonl"));
    let id = execution.to_owned();
    move |op: u32| effects.get(&(id.clone(), op)).map_or(0, Vec::len)
}

/// Stops the agent and the kernel and removes the working directory.
async fn stop(kernel: &KernelHandle, slot: &Slot, workdir: &Path) {
    slot.kill().await;
    kernel.shutdown().await;
    let _ = std::fs::remove_dir_all(workdir);
}

/// The program of `stale-dispatch-then-repeat`: an at-most-once charge, an approval (which
/// retires the first dispatch), then a slow step that keeps the second dispatch's run live.
fn stale_program() -> Program {
    Program {
        label: "stale".to_owned(),
        ops: vec![
            Op::AtMostOnce {
                id: 1,
                before_ms: 0,
                after_ms: 0,
            },
            Op::Approval {
                id: 2,
                before_ms: 0,
            },
            Op::Step {
                id: 3,
                before_ms: 1000,
                after_ms: 1000,
            },
        ],
    }
}

/// Runs `stale-dispatch-then-repeat`; `Ok(true)` when the at-most-once effect ran at most once.
pub(crate) async fn stale_dispatch_then_repeat() -> Result<bool, BoxError> {
    let workdir = scenario_workdir()?;
    let (kernel, slot, kept) = start(&workdir).await?;
    slot.spawn().await?;
    let created = kernel
        .create_execution(serde_json::to_value(stale_program())?)
        .await?;
    let d1 = captured(&kept, 0, 200).await.ok_or("no first webhook")?;
    deliver("D1 attempt 1", slot.port, &d1, None).await;
    grant_first_approval(&kernel).await?;
    let d2 = captured(&kept, 1, 200)
        .await
        .ok_or("no webhook after the grant")?;
    deliver("D2 attempt 1", slot.port, &d2, None).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    deliver("D1 attempt 1 again (stale)", slot.port, &d1, None).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    deliver("D2 attempt 1 again", slot.port, &d2, None).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let count = effect_counter(&workdir, &created);
    println!("events:");
    print_events(&kernel, &created).await;
    let charges = count(1);
    println!(
        "execution {created}: at-most-once op 1 ran {charges} time(s); steps recorded {} (program has 3 ops)",
        kernel.steps(&created).await.unwrap_or_default().len()
    );
    stop(&kernel, &slot, &workdir).await;
    Ok(charges <= 1)
}

/// The program of `repeat-after-deadline`: an at-most-once charge, a slow step the 800 ms host
/// deadline interrupts, then an idempotent tool.
fn repeat_program() -> Program {
    Program {
        label: "repeat".to_owned(),
        ops: vec![
            Op::AtMostOnce {
                id: 1,
                before_ms: 0,
                after_ms: 0,
            },
            Op::Step {
                id: 2,
                before_ms: 600,
                after_ms: 600,
            },
            Op::Tool {
                id: 3,
                before_ms: 0,
                after_ms: 0,
            },
        ],
    }
}

/// Runs `repeat-after-deadline`; `Ok(true)` when the at-most-once effect ran at most once.
pub(crate) async fn repeat_after_deadline() -> Result<bool, BoxError> {
    let workdir = scenario_workdir()?;
    let (kernel, slot, kept) = start(&workdir).await?;
    slot.spawn().await?;
    let created = kernel
        .create_execution(serde_json::to_value(repeat_program())?)
        .await?;
    let first = captured(&kept, 0, 100).await.ok_or("no webhook")?;
    deliver(
        "attempt 1 with an 800 ms host deadline",
        slot.deadline_port,
        &first,
        Some(800),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(2000)).await;
    println!("events after the first run:");
    print_events(&kernel, &created).await;
    deliver(
        "attempt 1 again, same process, lease still live",
        slot.port,
        &first,
        None,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let count = effect_counter(&workdir, &created);
    println!("events after the repeat:");
    print_events(&kernel, &created).await;
    let charges = count(1);
    println!(
        "execution {created}: at-most-once op 1 ran {charges} time(s); step op 2 ran {}; steps recorded {}",
        count(2),
        kernel.steps(&created).await.unwrap_or_default().len()
    );
    stop(&kernel, &slot, &workdir).await;
    Ok(charges <= 1)
}
