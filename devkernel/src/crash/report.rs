//! What a crash test found: every crash point tried, and what went wrong at each.

use std::fmt;

use rebuno::Idempotency;
use serde_json::Value;

use rebuno::wire::{ExecutionStatus, StepRecord};

/// Where, around one step, the agent's process dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CrashPoint {
    /// Before the step is submitted: the kernel never hears of it.
    BeforeSubmit,
    /// The kernel recorded the step, but its answer is lost: the body never starts.
    AfterSubmit,
    /// The body ran (its effect happened), but its result never reached the kernel.
    InBody,
    /// The kernel recorded the result, but its acknowledgement is lost.
    AfterComplete,
}

impl CrashPoint {
    /// Every point, in the order a step meets them.
    pub const ALL: [Self; 4] = [
        Self::BeforeSubmit,
        Self::AfterSubmit,
        Self::InBody,
        Self::AfterComplete,
    ];

    /// Whether the point lies inside a body that runs (only a step answered `proceed` has one).
    pub fn needs_a_live_body(self) -> bool {
        matches!(self, Self::InBody | Self::AfterComplete)
    }

    fn label(self) -> &'static str {
        match self {
            Self::BeforeSubmit => "before submit",
            Self::AfterSubmit => "after submit",
            Self::InBody => "in body",
            Self::AfterComplete => "after complete",
        }
    }
}

impl fmt::Display for CrashPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// A step as the kernel recorded it, and how often its body started across incarnations.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StepRuns {
    /// `tool_call`, `llm_call` or `local`.
    pub kind: String,
    /// Tool id, model id or step name.
    pub target: String,
    /// Whether its body may run again after a crash in it (`SafeToRetry`) or must run at
    /// most once (`AtMostOnce`).
    pub idempotency: Idempotency,
    /// Its recorded status (`succeeded`, `failed`, ...).
    pub status: String,
    /// How often its body started (a `proceed` that reached an agent).
    pub body_runs: usize,
}

impl StepRuns {
    pub(super) fn new(step: &StepRecord, body_runs: usize) -> Self {
        Self {
            kind: step.kind.clone(),
            target: step.target.clone(),
            idempotency: idempotency(&step.idempotency),
            status: step.status.clone(),
            body_runs,
        }
    }

    /// Whether its body ran more often than its idempotency allows: an `at_most_once` body
    /// that started twice. A `safe_to_retry` body may rightly run again after a crash in it.
    pub fn ran_too_often(&self) -> bool {
        self.idempotency == Idempotency::AtMostOnce && self.body_runs > 1
    }

    fn describe(&self) -> String {
        format!(
            "{} `{}` ({})",
            self.kind,
            self.target,
            self.idempotency.as_str()
        )
    }
}

/// A recorded idempotency: `at_most_once`, else the default, `safe_to_retry`.
pub(super) fn idempotency(recorded: &str) -> Idempotency {
    if recorded == Idempotency::AtMostOnce.as_str() {
        Idempotency::AtMostOnce
    } else {
        Idempotency::SafeToRetry
    }
}

/// Something a crash revealed.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Problem {
    /// The execution ended differently from the run without a crash (checked only when two
    /// uncrashed executions end alike).
    OutcomeDiffers {
        /// Status and output (or failure reason) without a crash.
        expected: (ExecutionStatus, Value),
        /// With it.
        got: (ExecutionStatus, Value),
    },
    /// An `at_most_once` body started more than once.
    RanTwice(StepRuns),
    /// A step recorded as succeeded whose body no agent was ever told to run.
    NeverRan(StepRuns),
    /// A step recorded before the crash was never asked for again after it: the handler took
    /// another path on re-delivery (it reads a clock, a random number or outside state
    /// outside a step).
    Abandoned(StepRuns),
    /// The run ended before reaching the crash point, where the run without a crash had
    /// reached it: the handler makes a different number of steps from one run to the next.
    CrashPointNotReached,
    /// The execution did not end in time after the re-delivery.
    Unfinished(ExecutionStatus),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutcomeDiffers { expected, got } => write!(
                f,
                "the outcome differs: {:?} {} without a crash, {:?} {} with it",
                expected.0, expected.1, got.0, got.1
            ),
            Self::RanTwice(step) => write!(f, "{} ran {} times", step.describe(), step.body_runs),
            Self::NeverRan(step) => {
                write!(f, "{} succeeded but its body never ran", step.describe())
            }
            Self::Abandoned(step) => write!(
                f,
                "{} was recorded before the crash but never asked for again after it: the \
                 handler is not deterministic outside its steps",
                step.describe()
            ),
            Self::CrashPointNotReached => f.write_str(
                "the run ended before the crash point the uncrashed run reached: the handler \
                 makes a different number of steps from one run to the next",
            ),
            Self::Unfinished(status) => write!(f, "still {status:?} after the re-delivery"),
        }
    }
}

/// One crash tried: where, what the execution did, and what went wrong.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Scenario {
    /// The step (1-based, in submit order) around which the process died.
    pub step: usize,
    /// Where around it.
    pub point: CrashPoint,
    /// An `at_most_once` step (the crashed one, or one in flight beside it) whose outcome the
    /// kernel cannot know: it fails as `indeterminate` on re-delivery and the handler sees that
    /// error, so a different outcome is expected, not a problem.
    pub indeterminate: bool,
    /// Deliveries of the execution (the crashed one and the re-delivery).
    pub deliveries: usize,
    /// Every recorded step, with its body runs across both incarnations.
    pub steps: Vec<StepRuns>,
    /// What went wrong; empty when the crash was survived.
    pub problems: Vec<Problem>,
}

/// What [`crash_every_step`](super::crash_every_step) found.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CrashReport {
    /// How the execution ended without a crash.
    pub status: ExecutionStatus,
    /// Its output (or failure reason) without a crash.
    pub outcome: Value,
    /// Whether two executions without a crash ended the same way. When they do not (a clock
    /// read in a step makes each execution's output its own), outcomes are not compared and
    /// the steps alone decide.
    pub stable_outcome: bool,
    /// Its steps without a crash, in submit order.
    pub steps: Vec<StepRuns>,
    /// Every crash tried.
    pub scenarios: Vec<Scenario>,
}

impl CrashReport {
    /// Whether every crash was survived: same outcome, no `at_most_once` body twice, every
    /// recorded step asked for again.
    pub fn is_ok(&self) -> bool {
        self.problems().next().is_none()
    }

    /// Every `at_most_once` step whose body ran more than once, with the crash that did it
    /// (each is also a [`Problem::RanTwice`], so [`is_ok`](Self::is_ok) is false). This is the
    /// assertion for an agent with steps of both idempotencies: a `safe_to_retry` body cut
    /// off by a crash runs again, as it should, so `body_runs <= 1` holds only for
    /// `at_most_once` steps.
    ///
    /// ```no_run
    /// # async fn demo(kernel: rebuno_devkernel::DevKernel, factory: fn() -> rebuno::AgentBuilder) -> Result<(), rebuno_devkernel::DevKernelError> {
    /// let report = rebuno_devkernel::crash::crash_every_step(&kernel, factory, serde_json::json!({})).await?;
    /// assert_eq!(report.at_most_once_ran_twice().count(), 0, "{report}");
    /// # Ok(()) }
    /// ```
    pub fn at_most_once_ran_twice(&self) -> impl Iterator<Item = (&Scenario, &StepRuns)> {
        self.scenarios.iter().flat_map(|scenario| {
            scenario
                .steps
                .iter()
                .filter(|step| step.ran_too_often())
                .map(move |step| (scenario, step))
        })
    }

    /// Every problem, with the scenario that found it.
    pub fn problems(&self) -> impl Iterator<Item = (&Scenario, &Problem)> {
        self.scenarios
            .iter()
            .flat_map(|s| s.problems.iter().map(move |p| (s, p)))
    }
}

impl fmt::Display for CrashReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let problems = self.problems().count();
        writeln!(
            f,
            "crash test: {} steps, {} crash points tried, {problems} problem(s); without a crash: {:?} {}",
            self.steps.len(),
            self.scenarios.len(),
            self.status,
            self.outcome
        )?;
        if !self.stable_outcome {
            writeln!(
                f,
                "  (two uncrashed executions ended differently: outcomes not compared, steps only)"
            )?;
        }
        for scenario in &self.scenarios {
            let step = self
                .steps
                .get(scenario.step - 1)
                .map_or_else(String::new, StepRuns::describe);
            let verdict = match (scenario.problems.is_empty(), scenario.indeterminate) {
                (true, true) => "ok (indeterminate, as it must be)",
                (true, false) => "ok",
                (false, _) => "FAILED",
            };
            writeln!(
                f,
                "  step {} {step}, {}: {verdict}, {} deliveries",
                scenario.step, scenario.point, scenario.deliveries
            )?;
            for problem in &scenario.problems {
                writeln!(f, "    {problem}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(target: &str, idempotency: Idempotency, body_runs: usize) -> StepRuns {
        StepRuns {
            kind: "tool_call".to_owned(),
            target: target.to_owned(),
            idempotency,
            status: "succeeded".to_owned(),
            body_runs,
        }
    }

    /// A `safe_to_retry` body run twice is a crash survived; an `at_most_once` one is not.
    #[test]
    fn only_at_most_once_steps_run_too_often() {
        let scenario = Scenario {
            step: 1,
            point: CrashPoint::InBody,
            indeterminate: false,
            deliveries: 2,
            steps: vec![
                runs("lookup", Idempotency::SafeToRetry, 2),
                runs("reply", Idempotency::AtMostOnce, 1),
                runs("charge", Idempotency::AtMostOnce, 2),
            ],
            problems: Vec::new(),
        };
        let report = CrashReport {
            status: ExecutionStatus::Completed,
            outcome: Value::Null,
            stable_outcome: true,
            steps: Vec::new(),
            scenarios: vec![scenario],
        };
        let twice: Vec<&str> = report
            .at_most_once_ran_twice()
            .map(|(_, step)| step.target.as_str())
            .collect();
        assert_eq!(twice, ["charge"]);
    }

    #[test]
    fn a_recorded_idempotency_reads_as_the_enum() {
        assert_eq!(idempotency("at_most_once"), Idempotency::AtMostOnce);
        assert_eq!(idempotency("safe_to_retry"), Idempotency::SafeToRetry);
        assert_eq!(idempotency(""), Idempotency::SafeToRetry);
    }
}
