//! Crash testing: run one execution of an agent, then run it again with the agent's process
//! dying at every step boundary in turn, and check that every crash is survived.
//!
//! A durable handler must end the same way however often it is cut off and re-delivered: a
//! recorded step replays, an unfinished `safe_to_retry` step runs again, and an `at_most_once`
//! step never runs twice (the kernel fails it as `indeterminate` when it cannot know). What
//! breaks this is code outside steps that changes between runs: a clock, a random number, a
//! read of outside state. [`crash_every_step`] finds it.
//!
//! For each step of an uncrashed run and each [`CrashPoint`] (before the submit, after it with
//! the answer lost, inside the body, after the complete with its answer lost) it starts a
//! fresh execution on a fresh agent from your factory; the agent's transport stops answering at
//! that point (the process "dies": no more writes, no heartbeats), a second agent from the
//! factory is served in its place, the kernel re-delivers, and the execution must end as the
//! uncrashed one did. Body runs are counted from the kernel's `proceed` answers that reached an
//! agent, so your tools need no counters.
//!
//! ```no_run
//! use rebuno::{Agent, HandlerError, step};
//! use rebuno_devkernel::DevKernel;
//! use rebuno_devkernel::crash::crash_every_step;
//! use serde_json::json;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let kernel = DevKernel::start().await?;
//! let hello = || {
//!     Agent::builder("hello").handler(|name: String| async move {
//!         let greeting = step("greet", move || async move {
//!             Ok::<_, HandlerError>(format!("hello, {name}"))
//!         })
//!         .await?;
//!         Ok::<_, HandlerError>(greeting)
//!     })
//! };
//! let report = crash_every_step(&kernel, hello, json!("Ada")).await?;
//! assert!(report.is_ok(), "{report}");
//! # Ok(()) }
//! ```

mod report;
mod transport;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use rebuno::AgentBuilder;
use rebuno::transport::{HyperTransport, Transport};
use serde_json::Value;

pub use report::{CrashPoint, CrashReport, Problem, Scenario, StepRuns};
use transport::CrashingTransport;

use crate::{DevKernel, DevKernelError, NewExecution, ServedAgent};
use rebuno::wire::{Execution, ExecutionStatus, StepRecord};

/// How long one run (with or without a crash) may take to end.
const RUN_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `input` through the agent `factory` builds, once without a crash and then once per
/// step and [`CrashPoint`], and reports what each crash did. The factory is called for every
/// incarnation of the agent (two per crash), as a restarted process would build it anew.
///
/// The agent must be able to end without help (no approval to grant, no subagent of another
/// agent): an execution that does not end within 30 s after a re-delivery is reported as
/// [`Problem::Unfinished`].
///
/// # Errors
///
/// The agent does not build or cannot be served, or the run without a crash does not end.
pub async fn crash_every_step<F>(
    kernel: &DevKernel,
    factory: F,
    input: Value,
) -> Result<CrashReport, DevKernelError>
where
    F: Fn() -> AgentBuilder,
{
    let mut baseline = run_uncrashed(kernel, &factory, &input).await?;
    let again = run_uncrashed(kernel, &factory, &input).await?;
    baseline.stable = outcome(&again.execution) == outcome(&baseline.execution);
    let mut scenarios = Vec::new();
    for (position, live) in baseline.proceeded.iter().copied().enumerate() {
        for point in CrashPoint::ALL {
            if point.needs_a_live_body() && !live {
                continue;
            }
            scenarios
                .push(run_crashed(kernel, &factory, &input, &baseline, (position, point)).await?);
        }
    }
    Ok(CrashReport {
        status: baseline.execution.status,
        outcome: outcome(&baseline.execution).1,
        stable_outcome: baseline.stable,
        steps: baseline.steps,
        scenarios,
    })
}

/// The run without a crash.
struct Baseline {
    execution: Execution,
    /// Steps in submit order.
    steps: Vec<StepRuns>,
    /// Whether each submit was answered `proceed`.
    proceeded: Vec<bool>,
    /// Whether a second uncrashed execution ended the same way (else outcomes say nothing).
    stable: bool,
}

/// An incarnation of the agent: served, with its transport.
struct Incarnation {
    served: ServedAgent,
    transport: CrashingTransport,
}

async fn incarnation<F>(
    kernel: &DevKernel,
    factory: &F,
    armed: Option<(usize, CrashPoint)>,
) -> Result<Incarnation, DevKernelError>
where
    F: Fn() -> AgentBuilder,
{
    let inner: Arc<dyn Transport> = Arc::new(HyperTransport::new()?);
    let transport = CrashingTransport::new(inner, armed);
    let served = kernel.serve(factory().transport(transport.clone())).await?;
    Ok(Incarnation { served, transport })
}

async fn start(
    kernel: &DevKernel,
    served: &ServedAgent,
    input: &Value,
) -> Result<String, DevKernelError> {
    let new = NewExecution::new(served.agent().id(), input.clone());
    Ok(kernel.create_execution(new).await?.id)
}

async fn run_uncrashed<F>(
    kernel: &DevKernel,
    factory: &F,
    input: &Value,
) -> Result<Baseline, DevKernelError>
where
    F: Fn() -> AgentBuilder,
{
    let agent = incarnation(kernel, factory, None).await?;
    let id = start(kernel, &agent.served, input).await?;
    let execution = kernel.wait_terminal(&id, RUN_TIMEOUT).await?;
    let (answered, proceeded, runs) = agent.transport.with_tap(|tap| {
        (
            tap.answered.clone(),
            tap.proceeded.clone(),
            tap.body_runs.clone(),
        )
    });
    agent.served.shutdown().await;
    let recorded = kernel.steps(&id);
    let steps = answered
        .iter()
        .flatten()
        .filter_map(|step_id| recorded.iter().find(|s| &s.step_id == step_id))
        .map(|step| StepRuns::new(step, runs.get(&step.step_id).copied().unwrap_or(0)))
        .collect();
    Ok(Baseline {
        execution,
        steps,
        proceeded,
        stable: true,
    })
}

/// One crash: a fresh execution, the first incarnation dying at `armed`, a second one served
/// in its place, a re-delivery, and the checks.
async fn run_crashed<F>(
    kernel: &DevKernel,
    factory: &F,
    input: &Value,
    baseline: &Baseline,
    armed: (usize, CrashPoint),
) -> Result<Scenario, DevKernelError>
where
    F: Fn() -> AgentBuilder,
{
    let first = incarnation(kernel, factory, Some(armed)).await?;
    let id = start(kernel, &first.served, input).await?;
    let reached = tokio::select! {
        () = first.transport.crashed() => true,
        _ = kernel.wait_terminal(&id, RUN_TIMEOUT) => false,
    };
    let mut scenario = Scenario {
        step: armed.0 + 1,
        point: armed.1,
        indeterminate: false,
        deliveries: 1,
        steps: Vec::new(),
        problems: Vec::new(),
    };
    if !reached {
        scenario.problems.push(Problem::CrashPointNotReached);
        first.served.shutdown().await;
        return Ok(scenario);
    }
    let recorded_before = kernel.steps(&id);
    let second = incarnation(kernel, factory, None).await?;
    drop(first.served); // the dead process's server goes; its requests hang forever
    kernel.redeliver(&id)?;
    scenario.deliveries = 2;
    let ended = kernel.wait_terminal(&id, RUN_TIMEOUT).await.ok();
    second.served.shutdown().await;
    let crash = Crash {
        first: first.transport,
        second: second.transport,
        recorded_before,
    };
    crash.check(kernel, &id, baseline, ended, &mut scenario);
    Ok(scenario)
}

/// What a crash left to check: both incarnations' views and the steps recorded before it
/// (settled or not: a deterministic handler asks for every one of them again).
struct Crash {
    first: CrashingTransport,
    second: CrashingTransport,
    recorded_before: Vec<StepRecord>,
}

impl Crash {
    /// The checks of one crash, recorded as problems of `scenario`.
    fn check(
        &self,
        kernel: &DevKernel,
        id: &str,
        baseline: &Baseline,
        ended: Option<Execution>,
        scenario: &mut Scenario,
    ) {
        let runs = body_runs(&self.first, &self.second);
        let steps = kernel.steps(id);
        let count = |step: &StepRecord| runs.get(&step.step_id).copied().unwrap_or(0);
        scenario.steps = steps.iter().map(|s| StepRuns::new(s, count(s))).collect();
        scenario.indeterminate = steps.iter().any(left_indeterminate);
        for step in scenario.steps.iter().filter(|s| s.ran_too_often()) {
            scenario.problems.push(Problem::RanTwice(step.clone()));
        }
        let succeeded = |s: &&StepRecord| s.status == "succeeded";
        for step in steps.iter().filter(succeeded).filter(|s| count(s) == 0) {
            scenario
                .problems
                .push(Problem::NeverRan(StepRuns::new(step, 0)));
        }
        let asked_again: HashSet<String> = self
            .second
            .with_tap(|tap| tap.answered.iter().flatten().cloned().collect());
        for step in self
            .recorded_before
            .iter()
            .filter(|s| !asked_again.contains(&s.step_id))
        {
            scenario
                .problems
                .push(Problem::Abandoned(StepRuns::new(step, count(step))));
        }
        let Some(execution) = ended else {
            let status = kernel
                .execution(id)
                .map_or(ExecutionStatus::Running, |e| e.status);
            return scenario.problems.push(Problem::Unfinished(status));
        };
        let (expected, got) = (outcome(&baseline.execution), outcome(&execution));
        if baseline.stable && got != expected && !scenario.indeterminate {
            scenario
                .problems
                .push(Problem::OutcomeDiffers { expected, got });
        }
    }
}

/// Body starts by step id, over both incarnations.
fn body_runs(first: &CrashingTransport, second: &CrashingTransport) -> HashMap<String, usize> {
    let mut runs = first.with_tap(|tap| tap.body_runs.clone());
    second.with_tap(|tap| {
        for (id, n) in &tap.body_runs {
            *runs.entry(id.clone()).or_insert(0) += n;
        }
    });
    runs
}

/// Status and output (or failure reason) of an ended execution.
fn outcome(execution: &Execution) -> (ExecutionStatus, Value) {
    let value = match execution.status {
        ExecutionStatus::Failed => Value::String(execution.failure_reason.clone()),
        _ => execution.output.clone().unwrap_or(Value::Null),
    };
    (execution.status, value)
}

/// Whether the kernel failed `step` as `indeterminate`: an `at_most_once` step the crash cut off
/// between its record and its result (the crashed one, or one in flight beside it). The handler
/// then sees that error, so another outcome is expected, not a problem.
fn left_indeterminate(step: &StepRecord) -> bool {
    step.idempotency == "at_most_once"
        && step.status == "failed"
        && step
            .error
            .as_ref()
            .and_then(|e| e.get("reason"))
            .and_then(serde_json::Value::as_str)
            == Some("indeterminate")
}
