//! What a replay check found: each step the code asked for, what the history had, where they
//! part.

use std::fmt;

use rebuno::wire::{ExecutionStatus, StepRecord};
use serde_json::{Map, Value};

/// How the history answered one step the code asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Recorded and settled: replayed (its result or error), nothing run.
    Replayed,
    /// Recorded as denied by policy: the denial replayed.
    Denied,
    /// Recorded as waiting for an approval: the run stops here, as it did.
    AwaitingApproval,
    /// An `at_most_once` step recorded as started but never settled: the kernel fails it as
    /// `indeterminate` and the code gets that error instead of a second run.
    Indeterminate,
    /// Recorded as started but never settled (or cancelled): the kernel would run it again.
    /// The check stops the run before its body.
    Rerun,
    /// Not in the history: this code asks for a step the recorded run never made, which would
    /// run live. The check stops the run before its body.
    New,
}

impl Verdict {
    /// Whether the check answers with the recorded decision (else it stops the run there).
    pub(super) fn is_recorded(self) -> bool {
        !matches!(self, Self::Rerun | Self::New)
    }

    /// Whether the step's body would run.
    pub fn runs_live(self) -> bool {
        matches!(self, Self::Rerun | Self::New)
    }
}

/// One step the code asked for, in the order it asked.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AskedStep {
    /// 1-based position among the code's step submissions.
    pub position: usize,
    /// The step id the kernel would give it.
    pub step_id: String,
    /// `tool_call`, `llm_call` or `local`.
    pub kind: String,
    /// Tool id, model id or step name.
    pub target: String,
    /// The args it was submitted with.
    pub args: Value,
    /// `safe_to_retry` or `at_most_once`.
    pub idempotency: String,
    /// What the history made of it.
    pub verdict: Verdict,
}

impl AskedStep {
    /// Whether it would run live and must not run twice.
    pub fn is_dangerous(&self) -> bool {
        self.verdict.runs_live() && self.idempotency == AT_MOST_ONCE
    }
}

const AT_MOST_ONCE: &str = "at_most_once";

/// Whether a recorded step's body may have run: it was let through (or settled after
/// running). A denied, cancelled or still proposed step never took effect.
fn may_have_taken_effect(step: &StepRecord) -> bool {
    matches!(
        step.status.as_str(),
        "succeeded" | "failed" | "executing" | "allowed"
    )
}

/// An `at_most_once` step that may take effect a second time if the checked code took over
/// the execution; see [`ReplayReport::dangerous_steps`]. `Display` says why.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Danger<'a> {
    /// A step this code asks for that would run live: new to the history, or unsettled in an
    /// execution still under way.
    Live(&'a AskedStep),
    /// A recorded step that may have taken effect, after the divergence: the check stops at
    /// the first live step and never reached it, so it cannot tell whether this code asks
    /// for it again with the same args. When the changed step feeds it, a re-delivery runs it
    /// again with other args.
    AfterDivergence {
        /// The recorded step.
        step: &'a StepRecord,
        /// The step where the code parted from the history.
        divergence: &'a AskedStep,
    },
}

impl Danger<'_> {
    /// `tool_call`, `llm_call` or `local`.
    pub fn kind(&self) -> &str {
        match self {
            Self::Live(step) => &step.kind,
            Self::AfterDivergence { step, .. } => &step.kind,
        }
    }

    /// Tool id, model id or step name.
    pub fn target(&self) -> &str {
        match self {
            Self::Live(step) => &step.target,
            Self::AfterDivergence { step, .. } => &step.target,
        }
    }
}

impl fmt::Display for Danger<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Live(step) => write!(
                f,
                "{} would run live at step {}: it would take effect again",
                describe_asked(step),
                step.position
            ),
            Self::AfterDivergence { step, divergence } => write!(
                f,
                "{} [{}] was recorded after the divergence at step {}, which the check stops \
                 at, so it cannot tell whether this code asks for it again: if the changed \
                 `{}` feeds it, a re-delivery would run it again with other args",
                describe_recorded(step),
                step.status,
                divergence.position,
                divergence.target
            ),
        }
    }
}

/// How the handler's run ended in the check.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Ending {
    /// It completed with this output.
    Completed(Value),
    /// It failed with this reason.
    Failed(String),
    /// It stopped without an outcome: at a step that would run live, at an approval, or by
    /// control flow.
    Stopped,
    /// It had not ended when the check's time ran out (the report says how far it got).
    TimedOut(std::time::Duration),
}

/// What a replay check found. [`is_clean`](Self::is_clean) says whether the code replays the
/// history faithfully; `Display` says where and how it does not.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ReplayReport {
    /// The execution replayed.
    pub execution_id: String,
    /// Every step the code asked for, in order.
    pub asked: Vec<AskedStep>,
    /// Recorded steps the code never asked for, in the order they were first proposed.
    pub unreached: Vec<StepRecord>,
    /// How the run ended.
    pub ending: Ending,
    /// How the recorded execution stands (`completed`, `failed`, `running`, …).
    pub recorded_status: ExecutionStatus,
    /// The recorded output, or failure reason.
    pub recorded_outcome: Option<Value>,
    /// How many steps the history holds.
    pub recorded_steps: usize,
    /// Anything else worth knowing (requests a history cannot answer, resources).
    pub notes: Vec<String>,
}

impl ReplayReport {
    /// Whether the code replays the history faithfully: every recorded step asked for again
    /// with the same identity, no step the history lacks, and the same outcome as recorded.
    /// An execution still under way may go on to new steps once all its recorded ones replay.
    pub fn is_clean(&self) -> bool {
        !matches!(self.ending, Ending::TimedOut(_))
            && self.unreached.is_empty()
            && self.live_steps().all(|s| self.may_continue(s))
            && self.outcome_matches()
    }

    /// The first step where the code parts from the history, with the recorded step expected
    /// there (the first recorded one it never reached).
    pub fn divergence(&self) -> Option<(&AskedStep, Option<&StepRecord>)> {
        let step = self
            .asked
            .iter()
            .find(|s| s.verdict == Verdict::New && !self.may_continue(s))?;
        Some((step, self.unreached.first()))
    }

    /// The steps that would run live, if this code took over the execution: steps the
    /// history lacks, and unsettled ones of an execution still under way (an ended one never
    /// runs again, so its steps cut off by the end are its recorded end, not live).
    pub fn live_steps(&self) -> impl Iterator<Item = &AskedStep> {
        self.asked.iter().filter(|s| self.would_run(s))
    }

    /// The `at_most_once` steps this code may run a second time if it took over the
    /// execution: the live ones ([`Danger::Live`]), and after a divergence, the recorded ones
    /// the check never reached ([`Danger::AfterDivergence`]). The check stops at the first
    /// live step, so it cannot see whether the code would ask for those again with the same
    /// args: a changed lookup that feeds a reply makes a re-delivery send the reply again.
    ///
    /// ```no_run
    /// # fn demo(report: rebuno_devkernel::replay::ReplayReport) {
    /// for danger in report.dangerous_steps() {
    ///     println!("{} `{}`: {danger}", danger.kind(), danger.target());
    /// }
    /// assert_eq!(report.dangerous_steps().count(), 0, "{report}");
    /// # }
    /// ```
    pub fn dangerous_steps(&self) -> impl Iterator<Item = Danger<'_>> {
        let live = self
            .live_steps()
            .filter(|s| s.is_dangerous())
            .map(Danger::Live);
        live.chain(self.after_divergence())
    }

    /// The recorded `at_most_once` steps that may have taken effect and that the code never
    /// reached because the check stopped at a divergence, except the one a live
    /// `at_most_once` step at the divergence stands in for (the same kind and target).
    fn after_divergence(&self) -> impl Iterator<Item = Danger<'_>> {
        let divergence = self.divergence();
        let paired = divergence.and_then(|(step, expected)| {
            expected
                .filter(|e| step.is_dangerous() && e.kind == step.kind && e.target == step.target)
        });
        divergence.into_iter().flat_map(move |(divergence, _)| {
            self.unreached
                .iter()
                .filter(|s| s.idempotency == AT_MOST_ONCE && may_have_taken_effect(s))
                .filter(move |s| paired.is_none_or(|p| !std::ptr::eq(p, *s)))
                .map(move |step| Danger::AfterDivergence { step, divergence })
        })
    }

    fn would_run(&self, step: &AskedStep) -> bool {
        match step.verdict {
            Verdict::New => true,
            Verdict::Rerun => !self.recorded_status.is_terminal(),
            _ => false,
        }
    }

    /// A step past the end of an execution still under way, with every recorded step
    /// replayed, is its natural next step (and a rerun of an unsettled step is what the
    /// kernel would do too).
    fn may_continue(&self, step: &AskedStep) -> bool {
        !self.recorded_status.is_terminal() && self.unreached.is_empty() && step.verdict.runs_live()
    }

    fn outcome_matches(&self) -> bool {
        match (&self.recorded_status, &self.ending) {
            (ExecutionStatus::Completed, Ending::Completed(output)) => {
                self.recorded_outcome.as_ref().unwrap_or(&Value::Null) == output
            }
            (ExecutionStatus::Failed, Ending::Failed(reason)) => {
                self.recorded_outcome.as_ref().and_then(Value::as_str) == Some(reason.as_str())
            }
            // Ended from outside (a cancel, or the kernel failing it, e.g. dispatch_exhausted,
            // where the handler stops at the step it was cut off in): replaying its steps is
            // all there is. A handler's own failure replays as a failure.
            (ExecutionStatus::Cancelled, _) | (ExecutionStatus::Failed, Ending::Stopped) => true,
            (status, Ending::Stopped) => !status.is_terminal(),
            _ => false,
        }
    }
}

/// A step as one line: `tool_call search {"q":"rust"} (at_most_once)`, its args with sorted
/// keys, so the text is the same whatever serde_json features the build has.
fn describe(kind: &str, target: &str, args: Option<&Value>, idempotency: &str) -> String {
    let args = args.map_or_else(|| "null".to_owned(), |a| sorted(a).to_string());
    let args = truncate(&args, 200);
    let idempotency = if idempotency.is_empty() {
        "safe_to_retry"
    } else {
        idempotency
    };
    format!("{kind} `{target}` with {args} ({idempotency})")
}

/// `value` with every object's keys inserted in sorted order: printed sorted both with and
/// without serde_json's `preserve_order`.
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(object) => {
            let mut keys: Vec<&String> = object.keys().collect();
            keys.sort();
            let entries = keys.into_iter().map(|k| (k.clone(), sorted(&object[k])));
            Value::Object(entries.collect::<Map<String, Value>>())
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

fn describe_recorded(step: &StepRecord) -> String {
    describe(
        &step.kind,
        &step.target,
        step.args.as_ref(),
        &step.idempotency,
    )
}

fn describe_asked(step: &AskedStep) -> String {
    describe(
        &step.kind,
        &step.target,
        Some(&step.args),
        &step.idempotency,
    )
}

impl fmt::Display for ReplayReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.is_clean() { "clean" } else { "DIVERGES" };
        writeln!(f, "replay of execution {}: {verdict}", self.execution_id)?;
        self.write_steps(f)?;
        self.write_ending(f)?;
        let replayed = self.asked.iter().filter(|s| !s.verdict.runs_live()).count();
        write!(
            f,
            "  {replayed} of {} recorded steps replayed",
            self.recorded_steps
        )
    }
}

impl ReplayReport {
    /// The divergence, the steps left unsettled, and the steps that would run live.
    fn write_steps(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some((step, expected)) = self.divergence() {
            let had = expected.map_or_else(|| "no further step".to_owned(), describe_recorded);
            writeln!(
                f,
                "  step {}: the history has {had}; this code asked for {}, which would run live",
                step.position,
                describe_asked(step)
            )?;
        }
        for step in self
            .asked
            .iter()
            .filter(|s| s.verdict == Verdict::Rerun && !self.would_run(s))
        {
            writeln!(
                f,
                "  unsettled when the execution ended: step {}: {}",
                step.position,
                describe_asked(step)
            )?;
        }
        for step in self.live_steps() {
            let why = if step.verdict == Verdict::New {
                "new"
            } else {
                "unsettled, would run again"
            };
            let danger = if step.is_dangerous() {
                "  <- at_most_once: would take effect again"
            } else {
                ""
            };
            let asked = describe_asked(step);
            writeln!(f, "  live ({why}): step {}: {asked}{danger}", step.position)?;
        }
        Ok(())
    }

    /// The recorded steps never reached, the dangers past the divergence, the outcome and
    /// the notes.
    fn write_ending(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for step in &self.unreached {
            let recorded = describe_recorded(step);
            writeln!(f, "  never reached: {recorded} [{}]", step.status)?;
        }
        for danger in self.after_divergence() {
            writeln!(f, "  possibly dangerous: {danger}")?;
        }
        if !self.outcome_matches() {
            let recorded = self
                .recorded_outcome
                .as_ref()
                .map_or_else(String::new, |o| format!(" {o}"));
            writeln!(
                f,
                "  outcome: recorded {:?}{recorded}; this code {:?}",
                self.recorded_status, self.ending
            )?;
        }
        for note in &self.notes {
            writeln!(f, "  note: {note}")?;
        }
        Ok(())
    }
}
