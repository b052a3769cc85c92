//! The kernel process: a [`DevKernel`] on a loopback port, driven over stdin/stdout
//! ([`crate::control`]). It creates the executions and times them, so the agent process does
//! nothing but serve its agent.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use rebuno::wire::ExecutionStatus;
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde_json::json;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

use crate::control::{Reply, Request, RunReport, WaitReport};
use crate::gaps::{StepGaps, finite, occurred_nanos};
use crate::llm::Stub;
use crate::stats::quantile;

/// The agent id every variant registers as.
pub(crate) const AGENT_ID: &str = "bench";
/// Upper bound of any single wait.
const WAIT: Duration = Duration::from_secs(120);

/// The kernel process's state between requests.
struct Driver {
    kernel: DevKernel,
    agent_id: String,
    held: Vec<(String, usize)>,
    /// The stub LLM provider of the `llm` workload.
    llm: Stub,
}

/// Serves the kernel and answers control requests until `quit` or the end of stdin.
pub(crate) async fn run() -> Result<()> {
    let kernel = DevKernel::builder()
        .start()
        .await
        .context("starting the dev kernel")?;
    let llm = crate::llm::stub().await?;
    let mut out = tokio::io::stdout();
    send(&mut out, &Reply::Ready(kernel.url())).await?;
    let mut driver = Driver {
        kernel,
        agent_id: AGENT_ID.to_owned(),
        held: Vec::new(),
        llm,
    };
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let request: Request = serde_json::from_str(&line).context("bad control request")?;
        if matches!(request, Request::Quit) {
            break;
        }
        let reply = match driver.handle(request).await {
            Ok(reply) => reply,
            Err(error) => Reply::Error(format!("{error:#}")),
        };
        send(&mut out, &reply).await?;
    }
    driver.kernel.shutdown().await;
    Ok(())
}

async fn send(out: &mut tokio::io::Stdout, reply: &Reply) -> Result<()> {
    let mut line = serde_json::to_vec(reply)?;
    line.push(b'\n');
    out.write_all(&line).await?;
    out.flush().await?;
    Ok(())
}

impl Driver {
    async fn handle(&mut self, request: Request) -> Result<Reply> {
        match request {
            Request::Register {
                agent_id,
                webhook_url,
                secret,
            } => {
                self.kernel
                    .register_agent(AgentSpec::new(&agent_id, webhook_url, secret))?;
                self.agent_id = agent_id;
                Ok(Reply::Ok)
            }
            Request::Live { n, k, c, llm, rate } => {
                let input = self.input(k, if llm { "llm" } else { "live" });
                let pace = rate.map_or(Pace::InFlight(c), Pace::Rate);
                Ok(Reply::Run(self.live(n, pace, input).await?))
            }
            Request::Proxy { upstream, delay_ms } => {
                let delay = Duration::from_secs_f64(delay_ms / 1e3);
                Ok(Reply::Ready(crate::delay::start(&upstream, delay).await?))
            }
            Request::Hold { n, k, c, llm } => {
                let input = self.input(k, if llm { "llm_hold" } else { "hold" });
                Ok(Reply::Wait(self.hold(n, k, c, input).await?))
            }
            Request::Redeliver { c } => Ok(Reply::Run(self.redeliver(c).await?)),
            Request::Idle { m, paced } => Ok(Reply::Wait(self.idle(m, paced).await?)),
            Request::Input { k, mode } => Ok(Reply::Input(self.input(k, &mode))),
            Request::ProviderCalls => Ok(Reply::Count(self.llm.calls())),
            Request::RedeliverIds { ids } => {
                self.check_ids(&ids)?;
                for id in &ids {
                    self.kernel.redeliver(id)?;
                }
                Ok(Reply::Ok)
            }
            Request::AwaitTool { ids } => {
                self.check_ids(&ids)?;
                Ok(Reply::Wait(self.await_tool(&ids).await?))
            }
            Request::Quit => Ok(Reply::Ok),
        }
    }

    /// The input of a `k`-step execution in `mode` (LLM modes also get the stub's URL).
    fn input(&self, k: usize, mode: &str) -> serde_json::Value {
        if mode.starts_with("llm") {
            json!({"k": k, "mode": mode, "llm_url": self.llm.url})
        } else {
            json!({"k": k, "mode": mode})
        }
    }

    async fn create(&self, input: serde_json::Value) -> Result<String> {
        let created = self
            .kernel
            .create_execution(NewExecution::new(&self.agent_id, input))
            .await?;
        Ok(created.id)
    }

    /// `n` executions of `input`, started as `pace` says, each waited to its end.
    async fn live(&self, n: usize, pace: Pace, input: serde_json::Value) -> Result<RunReport> {
        let calls = self.llm.calls();
        let outcomes = Arc::new(Mutex::new(Vec::with_capacity(n)));
        let started = Instant::now();
        let one = {
            let (kernel, agent_id, outcomes) =
                (self.kernel.clone(), self.agent_id.clone(), outcomes.clone());
            move || {
                let (kernel, agent_id, outcomes) =
                    (kernel.clone(), agent_id.clone(), outcomes.clone());
                let input = input.clone();
                async move {
                    let outcome = run_one(&kernel, &agent_id, input).await;
                    lock(&outcomes).push(outcome);
                }
            }
        };
        let mut tasks = Vec::new();
        match pace {
            Pace::InFlight(c) => {
                let next = Arc::new(AtomicUsize::new(0));
                for _ in 0..c.clamp(1, n.max(1)) {
                    let (next, one) = (next.clone(), one.clone());
                    tasks.push(tokio::spawn(async move {
                        while next.fetch_add(1, Ordering::Relaxed) < n {
                            one().await;
                        }
                    }));
                }
            }
            Pace::Rate(rate) => {
                let every = Duration::from_secs_f64(1.0 / rate);
                let mut ticks = tokio::time::interval(every);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                for _ in 0..n {
                    ticks.tick().await;
                    tasks.push(tokio::spawn(one()));
                }
            }
        }
        for task in tasks {
            task.await?;
        }
        let elapsed_s = started.elapsed().as_secs_f64();
        let outcomes = std::mem::take(&mut *lock(&outcomes));
        let mut report = tally(&outcomes, elapsed_s);
        report.provider_calls = self.llm.calls() - calls;
        let mut gaps = StepGaps::default();
        for (id, _, _) in &outcomes {
            let events = self.kernel.events(id);
            let timed = events
                .iter()
                .map(|e| Ok((e.kind.as_str(), occurred_nanos(e)?)))
                .collect::<Result<Vec<_>>>()?;
            gaps.add(timed);
        }
        gaps.fill(&mut report);
        Ok(report)
    }

    /// `n` executions of `input` run their `k` steps on their first attempt and then wait.
    async fn hold(
        &mut self,
        n: usize,
        k: usize,
        c: usize,
        input: serde_json::Value,
    ) -> Result<WaitReport> {
        let started = Instant::now();
        let mut pending = Vec::new();
        let mut created = 0;
        self.held.clear();
        while created < n || !pending.is_empty() {
            while created < n && pending.len() < c.max(1) {
                pending.push(self.create(input.clone()).await?);
                created += 1;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
            let mut still = Vec::with_capacity(pending.len());
            for id in pending {
                let succeeded = self
                    .kernel
                    .steps(&id)
                    .iter()
                    .filter(|step| step.status == "succeeded")
                    .count();
                if succeeded >= k {
                    self.held.push((id, k));
                } else if self
                    .kernel
                    .execution(&id)
                    .is_some_and(|e| e.status.is_terminal())
                {
                    bail!("held execution {id} ended before re-delivery");
                } else {
                    still.push(id);
                }
            }
            pending = still;
            if started.elapsed() > WAIT {
                bail!("{} executions did not record their steps", pending.len());
            }
        }
        Ok(WaitReport {
            elapsed_s: started.elapsed().as_secs_f64(),
            reached: self.held.len(),
            ids: self.held.iter().map(|(id, _)| id.clone()).collect(),
        })
    }

    /// Re-delivers the held executions, `c` at a time.
    async fn redeliver(&mut self, c: usize) -> Result<RunReport> {
        let calls = self.llm.calls();
        let held = Arc::new(std::mem::take(&mut self.held));
        let next = Arc::new(AtomicUsize::new(0));
        let outcomes = Arc::new(Mutex::new(Vec::with_capacity(held.len())));
        let per_step = Arc::new(Mutex::new(Vec::with_capacity(held.len())));
        let started = Instant::now();
        let mut workers = Vec::new();
        for _ in 0..c.clamp(1, held.len().max(1)) {
            let (next, outcomes, per_step, held) = (
                next.clone(),
                outcomes.clone(),
                per_step.clone(),
                held.clone(),
            );
            let kernel = self.kernel.clone();
            workers.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((id, k)) = held.get(i).cloned() else {
                        break;
                    };
                    let t0 = Instant::now();
                    let outcome = match kernel.redeliver(&id) {
                        Ok(_) => match kernel.wait_terminal(&id, WAIT).await {
                            Ok(done) => (id, done.status, done.failure_reason),
                            Err(error) => (id, ExecutionStatus::Failed, error.to_string()),
                        },
                        Err(error) => (id, ExecutionStatus::Failed, error.to_string()),
                    };
                    if outcome.1 == ExecutionStatus::Completed && k > 0 {
                        lock(&per_step).push(t0.elapsed().as_secs_f64() * 1e3 / k as f64);
                    }
                    lock(&outcomes).push(outcome);
                }
            }));
        }
        for worker in workers {
            worker.await?;
        }
        let elapsed_s = started.elapsed().as_secs_f64();
        let outcomes = std::mem::take(&mut *lock(&outcomes));
        let mut report = tally(&outcomes, elapsed_s);
        report.provider_calls = self.llm.calls() - calls;
        report.steps = held.first().map_or(0, |(_, k)| *k) * report.completed;
        let mut per_step = std::mem::take(&mut *lock(&per_step));
        report.step_p50_ms = finite(quantile(&mut per_step, 0.50));
        report.step_p99_ms = finite(quantile(&mut per_step, 0.99));
        Ok(report)
    }

    /// `m` executions, each waiting inside a tool.
    async fn idle(&self, m: usize, paced: bool) -> Result<WaitReport> {
        let started = Instant::now();
        let mut ids = Vec::with_capacity(m);
        for _ in 0..m {
            let id = self.create(json!({"k": 0, "mode": "idle"})).await?;
            while paced && !self.waiting(&id) {
                if started.elapsed() > WAIT {
                    bail!("execution {id} never reached its tool");
                }
                tokio::time::sleep(Duration::from_micros(500)).await;
            }
            ids.push(id);
        }
        self.await_tool(&ids).await
    }

    /// Returns once every one of `ids` is executing its tool (polling every 50 ms; every
    /// 500 µs for a single one).
    async fn await_tool(&self, ids: &[String]) -> Result<WaitReport> {
        let started = Instant::now();
        let pause = if ids.len() == 1 {
            Duration::from_micros(500)
        } else {
            Duration::from_millis(50)
        };
        loop {
            let reached = ids.iter().filter(|id| self.waiting(id)).count();
            if reached == ids.len() {
                return Ok(WaitReport {
                    elapsed_s: started.elapsed().as_secs_f64(),
                    reached,
                    ids: Vec::new(),
                });
            }
            if started.elapsed() > WAIT {
                bail!(
                    "only {reached} of {} executions are waiting in their tool",
                    ids.len()
                );
            }
            tokio::time::sleep(pause).await;
        }
    }
}

impl Driver {
    /// Fails on an id the kernel does not know (before waiting on it for nothing).
    fn check_ids(&self, ids: &[String]) -> Result<()> {
        match ids.iter().find(|id| self.kernel.execution(id).is_none()) {
            Some(id) => bail!("bad execution id {id:?}"),
            None => Ok(()),
        }
    }

    /// Whether the execution's tool is executing.
    fn waiting(&self, id: &str) -> bool {
        self.kernel
            .steps(id)
            .iter()
            .any(|step| step.status == "executing")
    }
}

/// How a live run starts its executions.
#[derive(Debug, Clone, Copy)]
enum Pace {
    /// This many in flight, the next started as one ends (full load).
    InFlight(usize),
    /// This many per second, however many are in flight (an arrival rate).
    Rate(f64),
}

/// Creates one execution of `input` and waits for its end: (id, status, failure reason).
async fn run_one(
    kernel: &DevKernel,
    agent_id: &str,
    input: serde_json::Value,
) -> (String, ExecutionStatus, String) {
    match kernel
        .create_execution(NewExecution::new(agent_id, input))
        .await
    {
        Ok(created) => match kernel.wait_terminal(&created.id, WAIT).await {
            Ok(done) => (created.id, done.status, done.failure_reason),
            Err(error) => (created.id, ExecutionStatus::Failed, error.to_string()),
        },
        Err(error) => (String::new(), ExecutionStatus::Failed, error.to_string()),
    }
}

fn tally(outcomes: &[(String, ExecutionStatus, String)], elapsed_s: f64) -> RunReport {
    let completed = outcomes
        .iter()
        .filter(|(_, status, _)| *status == ExecutionStatus::Completed)
        .count();
    RunReport {
        elapsed_s,
        completed,
        failed: outcomes.len() - completed,
        first_failure: outcomes
            .iter()
            .find(|(_, status, _)| *status != ExecutionStatus::Completed)
            .map(|(id, status, reason)| format!("{id}: {} {reason}", status.as_str())),
        ..RunReport::default()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
