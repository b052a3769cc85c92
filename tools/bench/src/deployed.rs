//! The deployed setup's driver: it creates the executions and waits on them through
//! `rebuno::client::Client` over HTTP, as an application would, instead of the kernel process
//! doing it in-process. Latencies come from the event logs read through the same client after
//! the measured phase (step gaps exactly as [`crate::kernel`] computes them); the re-delivery
//! trigger alone goes through the kernel's control channel (the dev kernel has no HTTP route
//! for it).

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, bail};
use rebuno::client::Client;
use rebuno::wire::{Event, ExecutionStatus};
use serde_json::Value;
use tokio::task::JoinSet;

use crate::control::{Request, RunReport};
use crate::gaps::{StepGaps, finite, occurred_nanos};
use crate::kernel::AGENT_ID;
use crate::spawn::{KernelProc, check_failures};
use crate::stats::quantile;

/// Upper bound of any single wait.
const WAIT: Duration = Duration::from_secs(120);

/// How one execution ended.
struct Outcome {
    id: String,
    completed: bool,
    reason: String,
}

/// A client of the kernel at `url` (the dev kernel needs no API key).
pub(crate) fn client(url: &str) -> Result<Client> {
    Client::builder()
        .base_url(url)
        .build()
        .context("building the rebuno client")
}

/// Runs `jobs` as tasks, at most `c` at a time, and collects their results.
async fn in_flight<T, F>(c: usize, jobs: impl IntoIterator<Item = F>) -> Result<Vec<T>>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let mut set = JoinSet::new();
    let mut done = Vec::new();
    for job in jobs {
        if set.len() >= c.max(1)
            && let Some(result) = set.join_next().await
        {
            done.push(result?);
        }
        set.spawn(job);
    }
    while let Some(result) = set.join_next().await {
        done.push(result?);
    }
    Ok(done)
}

/// Creates one execution of `input` and waits for its end.
async fn create_and_wait(client: Client, input: Value) -> Outcome {
    let created = match client.create(AGENT_ID).input(input).send().await {
        Ok(created) => created,
        Err(error) => return failed(String::new(), &error),
    };
    wait(client, created.id).await
}

/// Waits for the end of execution `id`.
async fn wait(client: Client, id: String) -> Outcome {
    match client.wait(&id, WAIT).await {
        Ok(done) => Outcome {
            id,
            completed: done.status == ExecutionStatus::Completed,
            reason: format!("{:?} {}", done.status, done.failure_reason),
        },
        Err(error) => failed(id, &error),
    }
}

fn failed(id: String, error: &rebuno::Error) -> Outcome {
    Outcome {
        id,
        completed: false,
        reason: error.to_string(),
    }
}

fn tally(outcomes: &[Outcome], elapsed_s: f64) -> RunReport {
    let completed = outcomes.iter().filter(|o| o.completed).count();
    RunReport {
        elapsed_s,
        completed,
        failed: outcomes.len() - completed,
        first_failure: outcomes
            .iter()
            .find(|o| !o.completed)
            .map(|o| format!("{}: {}", o.id, o.reason)),
        ..RunReport::default()
    }
}

/// `n` executions of `input`, `c` in flight, each created and waited on (polled) through the
/// client. Returns the run (wall time from the first create to the last wait's return; no
/// latencies yet, see [`step_gaps`]) and the execution ids.
pub(crate) async fn live(
    client: &Client,
    input: &Value,
    n: usize,
    c: usize,
) -> Result<(RunReport, Vec<String>)> {
    let started = Instant::now();
    let jobs = (0..n).map(|_| create_and_wait(client.clone(), input.clone()));
    let outcomes = in_flight(c, jobs).await?;
    let report = tally(&outcomes, started.elapsed().as_secs_f64());
    check_failures(&report)?;
    Ok((report, outcomes.into_iter().map(|o| o.id).collect()))
}

/// One execution's log as `(event type, Unix nanoseconds)`, read through the client.
type Log = Vec<(String, i128)>;

/// Execution `id`'s [`Log`].
async fn log(client: Client, id: String) -> Result<(String, Log)> {
    let events = client
        .all_events(&id)
        .await
        .with_context(|| format!("reading the events of {id}"))?;
    let log = events.iter().map(timed).collect::<Result<_>>()?;
    Ok((id, log))
}

fn timed(event: &Event) -> Result<(String, i128)> {
    Ok((event.kind.clone(), occurred_nanos(event)?))
}

/// The event logs of `ids` by id, `c` read at a time.
async fn logs(client: &Client, ids: &[String], c: usize) -> Result<HashMap<String, Log>> {
    let jobs = ids.iter().map(|id| log(client.clone(), id.clone()));
    in_flight(c, jobs).await?.into_iter().collect()
}

/// The live step latencies and step count of `ids` into `report`, from their event logs.
pub(crate) async fn step_gaps(
    client: &Client,
    ids: &[String],
    c: usize,
    report: &mut RunReport,
) -> Result<()> {
    let mut gaps = StepGaps::default();
    for events in logs(client, ids, c).await?.values() {
        gaps.add(events.iter().map(|(kind, at)| (kind.as_str(), *at)));
    }
    gaps.fill(report);
    Ok(())
}

/// When each execution was re-delivered (wall clock, as the kernel's event timestamps).
pub(crate) struct Redelivered(Vec<(String, i128)>);

/// Re-delivers the held executions `ids` (`k` steps each), keeping `c` in flight: each one
/// re-delivered through the control channel, then waited on through the client. The report's
/// wall time runs from the first re-delivery to the last wait's return.
pub(crate) async fn replay(
    client: &Client,
    kernel: &mut KernelProc,
    ids: &[String],
    k: usize,
    c: usize,
) -> Result<(RunReport, Redelivered)> {
    let started = Instant::now();
    let mut set = JoinSet::new();
    let (mut outcomes, mut starts) = (Vec::new(), Vec::new());
    for id in ids {
        if set.len() >= c.max(1)
            && let Some(result) = set.join_next().await
        {
            outcomes.push(result?);
        }
        starts.push((id.clone(), unix_nanos_now()));
        let redeliver = Request::RedeliverIds {
            ids: vec![id.clone()],
        };
        kernel.request(&redeliver).await?;
        set.spawn(wait(client.clone(), id.clone()));
    }
    while let Some(result) = set.join_next().await {
        outcomes.push(result?);
    }
    let mut report = tally(&outcomes, started.elapsed().as_secs_f64());
    check_failures(&report)?;
    report.steps = k * report.completed;
    Ok((report, Redelivered(starts)))
}

/// The replayed step latencies into `report`: (the `execution.completed` event − the
/// re-delivery) / `k` per execution, from the logs read through the client.
pub(crate) async fn replay_latencies(
    client: &Client,
    redelivered: &Redelivered,
    k: usize,
    c: usize,
    report: &mut RunReport,
) -> Result<()> {
    let ids: Vec<String> = redelivered.0.iter().map(|(id, _)| id.clone()).collect();
    let logs = logs(client, &ids, c).await?;
    let mut per_step = Vec::with_capacity(ids.len());
    for (id, start) in &redelivered.0 {
        let completed = logs.get(id).and_then(|events| {
            events
                .iter()
                .rev()
                .find(|(kind, _)| kind == "execution.completed")
        });
        if let Some((_, at)) = completed {
            per_step.push((at - start) as f64 / 1e6 / k.max(1) as f64);
        }
    }
    report.step_p50_ms = finite(quantile(&mut per_step, 0.50));
    report.step_p99_ms = finite(quantile(&mut per_step, 0.99));
    Ok(())
}

/// Now, in Unix nanoseconds (the clock of the kernel's event timestamps).
fn unix_nanos_now() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(0))
}

/// Creates `m` executions of `input` (`idle` mode) through the client and returns once all
/// wait in their tool (asked of the kernel process, which reads its in-memory steps): paced,
/// one at a time, each once the previous one waits; otherwise `c` creates in flight at once.
pub(crate) async fn idle(
    client: &Client,
    kernel: &mut KernelProc,
    input: &Value,
    m: usize,
    paced: bool,
    c: usize,
) -> Result<()> {
    let create = |client: Client, input: Value| async move {
        client
            .create(AGENT_ID)
            .input(input)
            .send()
            .await
            .map(|e| e.id)
    };
    let mut ids = Vec::with_capacity(m);
    if paced {
        for _ in 0..m {
            let id = create(client.clone(), input.clone()).await?;
            ids.push(id.clone());
            kernel.wait(&Request::AwaitTool { ids: vec![id] }).await?;
        }
    } else {
        let jobs = (0..m).map(|_| create(client.clone(), input.clone()));
        for id in in_flight(c, jobs).await? {
            ids.push(id?);
        }
    }
    let report = kernel.wait(&Request::AwaitTool { ids }).await?;
    if report.reached != m {
        bail!(
            "only {} of {m} executions wait in their tool",
            report.reached
        );
    }
    Ok(())
}
