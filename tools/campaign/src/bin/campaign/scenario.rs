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

/// A webhook endpoint that keeps what the kernel sends and delivers nothing.
async fn capture() -> std::io::Result<(String, Arc<Mutex<Vec<(Bytes, String)>>>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/webhook", listener.local_addr()?);
    let kept: Arc<Mutex<Vec<(Bytes, String)>>> = Arc::default();
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
async fn start(
    workdir: &std::path::Path,
) -> Result<(KernelHandle, Arc<Slot>, Arc<Mutex<Vec<(Bytes, String)>>>), BoxError> {
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

/// Runs `stale-dispatch-then-repeat`; `Ok(true)` when the at-most-once effect ran at most once.
pub(crate) async fn stale_dispatch_then_repeat() -> Result<bool, BoxError> {
    let workdir =
        std::env::temp_dir().join(format!("rebuno-campaign-scenario-{}", std::process::id()));
    std::fs::create_dir_all(&workdir)?;
    let (kernel, slot, kept) = start(&workdir).await?;
    slot.spawn().await?;
    let program = Program {
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
    };
    let created = kernel
        .create_execution(serde_json::to_value(&program)?)
        .await?;
    let webhook = |n: usize| {
        let kept = Arc::clone(&kept);
        async move {
            for _ in 0..200 {
                if let Some(hook) = kept.lock().ok().and_then(|k| k.get(n).cloned()) {
                    return Some(hook);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            None
        }
    };
    let (d1, s1) = webhook(0).await.ok_or("no first webhook")?;
    println!(
        "D1 attempt 1 -> {:?}",
        post(slot.port, &d1, &s1, None).await
    );
    let mut granted = false;
    for _ in 0..200 {
        if let Some(approval) = kernel.approvals().await.first() {
            kernel
                .grant(&approval.id)
                .await
                .ok_or("the grant did not reach the kernel")?;
            granted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if !granted {
        return Err("no approval requested".into());
    }
    let (d2, s2) = webhook(1).await.ok_or("no webhook after the grant")?;
    println!(
        "D2 attempt 1 -> {:?}",
        post(slot.port, &d2, &s2, None).await
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    println!(
        "D1 attempt 1 again (stale) -> {:?}",
        post(slot.port, &d1, &s1, None).await
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    println!(
        "D2 attempt 1 again -> {:?}",
        post(slot.port, &d2, &s2, None).await
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (effects, _, _) = read_effects(&workdir.join("effects.jsonl"));
    let id = created.clone();
    let count = |op: u32| effects.get(&(id.clone(), op)).map_or(0, Vec::len);
    println!("events:");
    for event in kernel.events(&created).await.unwrap_or_default() {
        println!(
            "    {:>3} {:<22} {}",
            event.event_seq, event.kind, event.payload
        );
    }
    let charges = count(1);
    println!(
        "execution {id}: at-most-once op 1 ran {charges} time(s); steps recorded {} (program has 3 ops)",
        kernel.steps(&created).await.unwrap_or_default().len()
    );
    slot.kill().await;
    kernel.shutdown().await;
    let _ = std::fs::remove_dir_all(&workdir);
    Ok(charges <= 1)
}

/// Runs `repeat-after-deadline`; `Ok(true)` when the at-most-once effect ran at most once.
pub(crate) async fn repeat_after_deadline() -> Result<bool, BoxError> {
    let workdir =
        std::env::temp_dir().join(format!("rebuno-campaign-scenario-{}", std::process::id()));
    std::fs::create_dir_all(&workdir)?;
    let (kernel, slot, kept) = start(&workdir).await?;
    slot.spawn().await?;
    let program = Program {
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
    };
    let created = kernel
        .create_execution(serde_json::to_value(&program)?)
        .await?;
    let mut first = None;
    for _ in 0..100 {
        first = kept.lock().ok().and_then(|k| k.first().cloned());
        if first.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (body, signature) = first.ok_or("no webhook")?;
    println!(
        "attempt 1 with an 800 ms host deadline -> {:?}",
        post(slot.deadline_port, &body, &signature, Some(800)).await
    );
    tokio::time::sleep(Duration::from_millis(2000)).await;
    println!("events after the first run:");
    for event in kernel.events(&created).await.unwrap_or_default() {
        println!(
            "    {:>3} {:<22} {}",
            event.event_seq, event.kind, event.payload
        );
    }
    println!(
        "attempt 1 again, same process, lease still live -> {:?}",
        post(slot.port, &body, &signature, None).await
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (effects, _, _) = read_effects(&workdir.join("effects.jsonl"));
    let id = created.clone();
    let count = |op: u32| effects.get(&(id.clone(), op)).map_or(0, Vec::len);
    println!("events after the repeat:");
    for event in kernel.events(&created).await.unwrap_or_default() {
        println!(
            "    {:>3} {:<22} {}",
            event.event_seq, event.kind, event.payload
        );
    }
    let charges = count(1);
    println!(
        "execution {id}: at-most-once op 1 ran {charges} time(s); step op 2 ran {}; steps recorded {}",
        count(2),
        kernel.steps(&created).await.unwrap_or_default().len()
    );
    slot.kill().await;
    kernel.shutdown().await;
    let _ = std::fs::remove_dir_all(&workdir);
    Ok(charges <= 1)
}
