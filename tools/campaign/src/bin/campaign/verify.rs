//! The invariants, checked at the end from the effect log, the kernel's steps and event log
//! (a [`Snapshot`] read once the run is over), and what the proxies saw.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use rebuno::wire::{Event, Execution, ExecutionStatus, StepRecord};
use rebuno_campaign::rfc3339::unix_nanos;
use rebuno_campaign::{
    AT_MOST_ONCE, DENIED, EffectLine, GATED, MODEL, Op, Program, SPAWN, TOOL, expected_output,
};
use serde_json::Value;

use crate::kernel::Snapshot;
use crate::ledger::Ledger;

/// One broken invariant.
#[derive(Debug, Clone)]
pub(crate) struct Violation {
    pub(crate) invariant: &'static str,
    pub(crate) execution: String,
    pub(crate) detail: String,
}

/// What the checks found.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) executions: usize,
    pub(crate) children: usize,
    pub(crate) completed: usize,
    pub(crate) failed: BTreeMap<String, usize>,
    pub(crate) effects: usize,
    pub(crate) at_most_once_effects: usize,
    pub(crate) indeterminate_steps: usize,
    /// Settle calls of superseded attempts the kernel refused (fencing at work).
    pub(crate) fenced: usize,
    /// One failure reason per class.
    pub(crate) failed_examples: BTreeMap<String, String>,
    /// Settle calls by `kind status decision`.
    pub(crate) settles: BTreeMap<String, usize>,
    pub(crate) violations: Vec<Violation>,
}

impl Report {
    fn violate(&mut self, invariant: &'static str, execution: &str, detail: String) {
        self.violations.push(Violation {
            invariant,
            execution: execution.to_owned(),
            detail,
        });
    }
}

/// Effect lines by `(execution, op id)`.
type Effects = HashMap<(String, u32), Vec<EffectLine>>;

/// Reads the effect log: the lines by op, their number, and lines that do not parse.
pub(crate) fn read_effects(path: &Path) -> (Effects, usize, Vec<String>) {
    let mut map: Effects = HashMap::new();
    let mut bad = Vec::new();
    let mut total = 0;
    let text = std::fs::read_to_string(path).unwrap_or_default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<EffectLine>(line) {
            Ok(effect) => {
                total += 1;
                map.entry((effect.execution.clone(), effect.effect))
                    .or_default()
                    .push(effect);
            }
            Err(_) => bad.push(line.to_owned()),
        }
    }
    (map, total, bad)
}

/// The kernel step of a leaf op (the first started when there are several).
fn step_of<'a>(steps: &'a [StepRecord], op: &Op) -> Option<&'a StepRecord> {
    steps_of(steps, op).into_iter().min_by_key(|s| {
        let started = s.started_at.as_deref().and_then(unix_nanos);
        (started.is_none(), started)
    })
}

/// Every kernel step of a leaf op.
fn steps_of<'a>(steps: &'a [StepRecord], op: &Op) -> Vec<&'a StepRecord> {
    let (kind, target) = match op {
        Op::Tool { .. } => ("tool_call", TOOL.to_owned()),
        Op::AtMostOnce { .. } => ("tool_call", AT_MOST_ONCE.to_owned()),
        Op::Denied { .. } => ("tool_call", DENIED.to_owned()),
        Op::Approval { .. } => ("tool_call", GATED.to_owned()),
        Op::Subagent { .. } => ("tool_call", SPAWN.to_owned()),
        Op::Step { id, .. } => ("local", format!("op-{id}")),
        Op::Llm { .. } => ("llm_call", MODEL.to_owned()),
        Op::Parallel { .. } => return Vec::new(),
    };
    let id = u64::from(op.id());
    steps
        .iter()
        .filter(|s| {
            s.kind == kind
                && s.target == target
                && s.args
                    .as_ref()
                    .and_then(|a| a.get("id"))
                    .and_then(Value::as_u64)
                    == Some(id)
        })
        .collect()
}

fn error_reason(step: &StepRecord) -> Option<&str> {
    step.error
        .as_ref()
        .and_then(|e| e.get("reason"))
        .and_then(Value::as_str)
}

fn is_indeterminate(step: &StepRecord) -> bool {
    step.status == "failed" && error_reason(step) == Some("indeterminate")
}

/// Everything the checks need.
pub(crate) struct Inputs<'a> {
    pub(crate) kernel: &'a Snapshot,
    pub(crate) ledger: &'a Ledger,
    /// Top-level executions and their programs.
    pub(crate) created: &'a [(String, Program)],
    pub(crate) effects_path: &'a Path,
    /// The agents' and the kernel's stderr logs (checked for panics).
    pub(crate) agent_logs: Vec<std::path::PathBuf>,
    /// Child executions by parent id.
    pub(crate) children: HashMap<String, Vec<String>>,
    /// Kernel restarts were the only fault (`--scenario kernel-restart`): every execution must
    /// complete and no step body may run twice.
    pub(crate) restarts_only: bool,
}

/// Top-level executions and the children found under them, in the order they were checked:
/// id, program and parent (`None` for a top-level one).
type Checked = Vec<(String, Program, Option<String>)>;

/// How each checked execution ended (status and failure reason), by program label.
type Outcomes = HashMap<String, (ExecutionStatus, String)>;

/// Runs every check.
pub(crate) fn verify(inputs: &Inputs<'_>) -> Report {
    let mut report = Report::default();
    let (effects, total, bad) = read_effects(inputs.effects_path);
    count_effects(&mut report, &effects, total, bad);
    let (checked, outcomes) = check_executions(inputs, &mut report, &effects);
    check_subagent_failures(inputs, &mut report, &checked, &outcomes);
    check_fencing(inputs, &mut report);
    check_panics(inputs, &mut report);
    report
}

/// Counts the effect log's lines (and its at-most-once ones) for the summary, and reports the
/// lines that do not parse: the effect log must be well formed for the other checks to mean
/// anything.
fn count_effects(report: &mut Report, effects: &Effects, total: usize, bad: Vec<String>) {
    report.effects = total;
    report.at_most_once_effects = effects
        .values()
        .flatten()
        .filter(|e| e.kind == "at_most_once")
        .count();
    for line in bad {
        report.violate("effect log is well formed", "-", line);
    }
}

/// Checks every top-level execution and, breadth first, every child found under them. Returns
/// what was checked and how each ended, for the checks that span a parent and its children.
fn check_executions(
    inputs: &Inputs<'_>,
    report: &mut Report,
    effects: &Effects,
) -> (Checked, Outcomes) {
    // Children: by label, from the parents' programs; found through the parent's spawn step.
    let mut queue: Checked = inputs
        .created
        .iter()
        .map(|(id, p)| (id.clone(), p.clone(), None))
        .collect();
    let mut outcome: Outcomes = HashMap::new();
    let mut index = 0;
    while index < queue.len() {
        let (id, program, parent) = queue[index].clone();
        index += 1;
        if parent.is_some() {
            report.children += 1;
        } else {
            report.executions += 1;
        }
        let Some(execution) = inputs.kernel.execution(&id) else {
            report.violate("execution exists", &id, program.label.clone());
            continue;
        };
        let children = check_execution(inputs, report, &execution, &program, effects);
        for (child, child_program) in children {
            queue.push((child, child_program, Some(id.clone())));
        }
        outcome.insert(
            program.label.clone(),
            (execution.status, execution.failure_reason.clone()),
        );
    }
    (queue, outcome)
}

/// A parent failed by its subagent needs a failed child, or a cut of the spawn tool's own
/// kernel call (then its failure moves from `subagent_failed` to `network: cut subagent call`).
fn check_subagent_failures(
    inputs: &Inputs<'_>,
    report: &mut Report,
    checked: &Checked,
    outcome: &Outcomes,
) {
    for (id, program, _) in checked {
        let Some((status, reason)) = outcome.get(&program.label) else {
            continue;
        };
        if *status != ExecutionStatus::Failed || !reason.contains(SPAWN) {
            continue;
        }
        let child_failed = program.ops.iter().any(|op| match op {
            Op::Subagent { program, .. } => outcome
                .get(&program.label)
                .is_some_and(|(s, _)| *s == ExecutionStatus::Failed),
            _ => false,
        });
        let cut = inputs.ledger.cut_exists("POST", "/v0/executions")
            || !inputs.ledger.cuts_of(id).is_empty();
        if !child_failed && cut {
            // The spawn tool's own kernel call (child create, step read) was cut.
            reclass_as_cut_subagent_call(report, id, reason);
        } else if !child_failed {
            report.violate(
                "failed only with reasons the faults explain",
                id,
                format!("failed by its subagent but no child failed: {reason}"),
            );
        }
    }
}

/// Moves one failure from the `subagent_failed` class to `network: cut subagent call`, keeping
/// `id: reason` as the new class's example if it has none yet.
fn reclass_as_cut_subagent_call(report: &mut Report, id: &str, reason: &str) {
    if let Some(n) = report.failed.get_mut("subagent_failed") {
        *n -= 1;
    }
    *report
        .failed
        .entry("network: cut subagent call".to_owned())
        .or_default() += 1;
    report
        .failed_examples
        .entry("network: cut subagent call".to_owned())
        .or_insert_with(|| format!("{id}: {reason}"));
}

/// No panics: the agents' and the kernel's stderr have no `panicked at`.
fn check_panics(inputs: &Inputs<'_>, report: &mut Report) {
    for path in &inputs.agent_logs {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        for line in text.lines().filter(|l| l.contains("panicked at")) {
            report.violate("no panics", &path.display().to_string(), line.to_owned());
        }
    }
}

/// The reason class of a failure, or `None` when the faults do not explain it.
fn classify(
    inputs: &Inputs<'_>,
    execution: &Execution,
    steps: &[StepRecord],
) -> Result<&'static str, String> {
    let reason = execution.failure_reason.as_str();
    let id = &execution.id;
    if reason.contains(SPAWN) {
        return Ok("subagent_failed");
    }
    if reason.contains("outcome unknown") || reason.contains("retry refused") {
        if steps.iter().any(is_indeterminate) {
            return Ok("indeterminate");
        }
        return Err(format!("{reason} (but no step is indeterminate)"));
    }
    if reason.starts_with("agent_error: Network") {
        let cuts = inputs.ledger.cuts_of(id);
        if cuts
            .iter()
            .any(|(method, path, _)| method == "POST" && path.ends_with("/steps"))
        {
            return Ok("network: cut step submit");
        }
        return Err(format!("{reason} (no cut step submit of this execution)"));
    }
    Err(reason.to_owned())
}

/// Checks one execution; returns its children (id and program) to check next.
fn check_execution(
    inputs: &Inputs<'_>,
    report: &mut Report,
    execution: &Execution,
    program: &Program,
    effects: &Effects,
) -> Vec<(String, Program)> {
    let id = execution.id.as_str();
    let view = ExecutionView {
        inputs,
        execution,
        program,
        effects,
        id,
        steps: inputs.kernel.steps(id),
        events: inputs.kernel.events(id),
    };
    view.check_settles_once(report);
    view.check_ends(report);
    report.indeterminate_steps += view.steps.iter().filter(|s| is_indeterminate(s)).count();
    view.check_one_step_per_op(report);
    for op in program.leaves() {
        view.check_leaf(report, op);
    }
    view.check_outcome(report);
    check_restarts(inputs, report, execution, program, &view.events, effects);
    view.children(report)
}

/// One execution as the checks see it: the execution, its program, the kernel's steps and
/// events of it, and the effect log.
struct ExecutionView<'a> {
    inputs: &'a Inputs<'a>,
    execution: &'a Execution,
    program: &'a Program,
    effects: &'a Effects,
    /// The execution's id.
    id: &'a str,
    steps: Vec<StepRecord>,
    events: Vec<Event>,
}

impl ExecutionView<'_> {
    /// The program's label, which every detail starts with.
    fn label(&self) -> &str {
        &self.program.label
    }

    /// The effect lines of op `op` of this execution.
    fn effect_lines(&self, op: &Op) -> Option<&Vec<EffectLine>> {
        self.effects.get(&(self.id.to_owned(), op.id()))
    }

    /// Each step settles once: at most one `step.succeeded|failed|denied` event per step id.
    fn check_settles_once(&self, report: &mut Report) {
        let mut settles: HashMap<&str, usize> = HashMap::new();
        for event in &self.events {
            if matches!(
                event.kind.as_str(),
                "step.succeeded" | "step.failed" | "step.denied"
            ) && let Some(step) = event.payload.get("step_id").and_then(Value::as_str)
            {
                *settles.entry(step).or_default() += 1;
            }
        }
        for (step, n) in settles.iter().filter(|(_, n)| **n > 1) {
            report.violate(
                "each step settles once",
                self.id,
                format!("{}: step {step} settled {n} times", self.label()),
            );
        }
    }

    /// Nothing stuck: the execution is terminal (the detail shows its last six events).
    fn check_ends(&self, report: &mut Report) {
        if self.execution.status.is_terminal() {
            return;
        }
        let tail: Vec<String> = self
            .events
            .iter()
            .rev()
            .take(6)
            .map(|e| format!("{}:{}", e.event_seq, e.kind))
            .collect();
        report.violate(
            "every execution ends",
            self.id,
            format!(
                "{}: still {:?}; last events {tail:?}",
                self.label(),
                self.execution.status
            ),
        );
    }

    /// One kernel step per op (leaves and subagent calls): a second one means the op was
    /// submitted twice in one attempt.
    fn check_one_step_per_op(&self, report: &mut Report) {
        let subagents = self
            .program
            .ops
            .iter()
            .filter(|op| matches!(op, Op::Subagent { .. }));
        for op in self.program.leaves().into_iter().chain(subagents) {
            let matching: Vec<&str> = steps_of(&self.steps, op)
                .iter()
                .map(|s| &s.step_id[..8])
                .collect();
            if matching.len() > 1 {
                report.violate(
                    "each op is one step",
                    self.id,
                    format!(
                        "{}: op {} ({:?}) has {} steps {matching:?}",
                        self.label(),
                        op.id(),
                        op.effect_kind().unwrap_or("subagent"),
                        matching.len()
                    ),
                );
            }
        }
    }

    /// Checks one leaf op against the effect log and its kernel step: the logged kind, how many
    /// times its body ran for its kind of op, and, in a completed execution, its step's status.
    fn check_leaf(&self, report: &mut Report, op: &Op) {
        let step = step_of(&self.steps, op);
        self.check_effect_kinds(report, op);
        match op {
            Op::AtMostOnce { .. } => self.check_at_most_once(report, op, step),
            Op::Denied { .. } => self.check_denied_never_runs(report, op, step),
            Op::Tool { .. } | Op::Step { .. } | Op::Approval { .. } | Op::Llm { .. } => {
                self.check_recorded_effect_ran(report, op, step);
            }
            Op::Subagent { .. } | Op::Parallel { .. } => {}
        }
        if self.execution.status == ExecutionStatus::Completed {
            self.check_completed_step(report, op, step);
        }
    }

    /// The effect log matches the program: every line of `op` has the op's effect kind.
    fn check_effect_kinds(&self, report: &mut Report, op: &Op) {
        let kinds_ok = self.effect_lines(op).is_none_or(|lines| {
            lines
                .iter()
                .all(|l| Some(l.kind.as_str()) == op.effect_kind())
        });
        if !kinds_ok {
            report.violate(
                "effect log matches the program",
                self.id,
                format!("{}: op {} logged a different kind", self.label(), op.id()),
            );
        }
    }

    /// At most once: an at-most-once effect ran at most once, and exactly once when its step
    /// succeeded.
    fn check_at_most_once(&self, report: &mut Report, op: &Op, step: Option<&StepRecord>) {
        let count = self.effect_lines(op).map_or(0, Vec::len);
        let status = step.map(|s| s.status.as_str());
        if count > 1 {
            let pids: Vec<String> = self
                .effect_lines(op)
                .into_iter()
                .flatten()
                .map(|l| format!("pid {} attempt {}", l.pid, l.attempt))
                .collect();
            report.violate(
                "at-most-once effects run at most once",
                self.id,
                format!(
                    "{}: op {} ran {count} times ({pids:?}); step {status:?}",
                    self.label(),
                    op.id()
                ),
            );
        }
        if status == Some("succeeded") && count != 1 {
            report.violate(
                "a recorded effect ran",
                self.id,
                format!(
                    "{}: op {} succeeded but ran {count} times",
                    self.label(),
                    op.id()
                ),
            );
        }
    }

    /// A denied tool never runs: no effect line, and its step (if any) is `denied`.
    fn check_denied_never_runs(&self, report: &mut Report, op: &Op, step: Option<&StepRecord>) {
        let count = self.effect_lines(op).map_or(0, Vec::len);
        let status = step.map(|s| s.status.as_str());
        if count != 0 {
            report.violate(
                "a denied tool never runs",
                self.id,
                format!("{}: op {} ran {count} times", self.label(), op.id()),
            );
        }
        if step.is_some_and(|s| s.status != "denied") {
            report.violate(
                "a denied tool never runs",
                self.id,
                format!("{}: op {} step is {status:?}", self.label(), op.id()),
            );
        }
    }

    /// A recorded effect ran: a succeeded step of an op with a body has at least one effect line.
    fn check_recorded_effect_ran(&self, report: &mut Report, op: &Op, step: Option<&StepRecord>) {
        let count = self.effect_lines(op).map_or(0, Vec::len);
        let status = step.map(|s| s.status.as_str());
        if status == Some("succeeded") && count == 0 {
            report.violate(
                "a recorded effect ran",
                self.id,
                format!("{}: op {} succeeded but never ran", self.label(), op.id()),
            );
        }
    }

    /// Completed means complete: in a completed execution every leaf op's step is `succeeded`
    /// (the denied one `denied`).
    fn check_completed_step(&self, report: &mut Report, op: &Op, step: Option<&StepRecord>) {
        let status = step.map(|s| s.status.as_str());
        let want = if matches!(op, Op::Denied { .. }) {
            "denied"
        } else {
            "succeeded"
        };
        if status != Some(want) {
            report.violate(
                "a completed execution recorded every effect",
                self.id,
                format!(
                    "{}: op {} step is {status:?}, want {want:?}",
                    self.label(),
                    op.id()
                ),
            );
        }
    }

    /// Counts how the execution ended: a completed one must have the fault-free output, a
    /// failed one a reason the faults explain (its class counted), and nothing else ends.
    fn check_outcome(&self, report: &mut Report) {
        match self.execution.status {
            ExecutionStatus::Completed => {
                report.completed += 1;
                self.check_fault_free_output(report);
            }
            ExecutionStatus::Failed => self.classify_failure(report),
            status if status.is_terminal() => {
                report.violate(
                    "failed only with reasons the faults explain",
                    self.id,
                    format!("{}: ended {status:?} (nothing cancels)", self.label()),
                );
            }
            _ => {}
        }
    }

    /// A completed execution has the output the program computes without faults.
    fn check_fault_free_output(&self, report: &mut Report) {
        let want = expected_output(self.program);
        if self.execution.output.as_ref() != Some(&want) {
            report.violate(
                "a completed execution has the fault-free output",
                self.id,
                format!(
                    "{}: output {} != expected {want}",
                    self.label(),
                    self.execution.output.clone().unwrap_or(Value::Null)
                ),
            );
        }
    }

    /// Counts a failure in its class (keeping the first as the class's example), or as
    /// `unexplained` with a violation when the faults do not explain it.
    fn classify_failure(&self, report: &mut Report) {
        match classify(self.inputs, self.execution, &self.steps) {
            Ok(class) => {
                *report.failed.entry(class.to_owned()).or_default() += 1;
                report
                    .failed_examples
                    .entry(class.to_owned())
                    .or_insert_with(|| format!("{}: {}", self.id, self.execution.failure_reason));
            }
            Err(detail) => {
                *report.failed.entry("unexplained".to_owned()).or_default() += 1;
                report.violate(
                    "failed only with reasons the faults explain",
                    self.id,
                    format!("{}: {detail}", self.label()),
                );
            }
        }
    }

    /// Children, through the spawn steps' ids (a subagent's `spawned_by`); checks that they
    /// match the program, one per subagent call. Returns them (id and program) to check next.
    fn children(&self, report: &mut Report) -> Vec<(String, Program)> {
        let subagent_ops: Vec<(&Op, &Program)> = self
            .program
            .ops
            .iter()
            .filter_map(|op| match op {
                Op::Subagent { program, .. } => Some((op, program)),
                _ => None,
            })
            .collect();
        if subagent_ops.is_empty() {
            return Vec::new();
        }
        let children = self.spawned_children(report, &subagent_ops);
        self.check_one_child_per_call(report, &children);
        children
    }

    /// The kernel's children of this execution, each matched to the subagent op whose spawn
    /// step spawned it; a child of no spawn step, or whose input is not its program, is a
    /// violation (the latter is still returned).
    fn spawned_children(
        &self,
        report: &mut Report,
        subagent_ops: &[(&Op, &Program)],
    ) -> Vec<(String, Program)> {
        let mut children = Vec::new();
        for candidate in self.inputs.kernel_children(self.id) {
            let Some(child) = self.inputs.kernel.execution(&candidate) else {
                continue;
            };
            let Some((_, child_program)) = subagent_ops.iter().find(|(op, _)| {
                step_of(&self.steps, op).map(|s| s.step_id.as_str())
                    == child.spawned_by.as_ref().map(|s| s.step_id.as_str())
            }) else {
                report.violate(
                    "subagents match the program",
                    &candidate,
                    format!("{}: a child of no spawn step", self.label()),
                );
                continue;
            };
            if child.input != serde_json::to_value(child_program).unwrap_or_default() {
                report.violate(
                    "subagents match the program",
                    &candidate,
                    format!("{}: child input differs from its program", self.label()),
                );
            }
            children.push((candidate, (*child_program).clone()));
        }
        children
    }

    /// One child per subagent call: no two children run the same child program (by label).
    fn check_one_child_per_call(&self, report: &mut Report, children: &[(String, Program)]) {
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (_, p) in children {
            *seen.entry(p.label.clone()).or_default() += 1;
        }
        for (child_label, n) in seen.into_iter().filter(|(_, n)| *n > 1) {
            report.violate(
                "one child per subagent call",
                self.id,
                format!("{}: {n} children for {child_label}", self.label()),
            );
        }
    }
}

/// No execution failed by a kernel restart: none at all when restarts were the only fault;
/// otherwise none failed `indeterminate` after a dispatch the restart reclaimed
/// (`kernel_restart`: a lease the kernel did not keep). With restarts only, no step body ran
/// twice either (the effect log).
fn check_restarts(
    inputs: &Inputs<'_>,
    report: &mut Report,
    execution: &Execution,
    program: &Program,
    events: &[Event],
    effects: &Effects,
) {
    let id = execution.id.clone();
    let label = &program.label;
    if execution.status == ExecutionStatus::Failed {
        let reason = &execution.failure_reason;
        let indeterminate = reason.contains("outcome unknown") || reason.contains("retry refused");
        let reclaimed_by_restart = events.iter().any(|e| {
            e.kind == "dispatch.reclaimed" && e.payload.to_string().contains("kernel_restart")
        });
        if inputs.restarts_only || (indeterminate && reclaimed_by_restart) {
            report.violate(
                "no execution failed by a kernel restart",
                &id,
                format!(
                    "{label}: failed {reason:?} (reclaimed by a restart: {reclaimed_by_restart})"
                ),
            );
        }
    }
    if !inputs.restarts_only {
        return;
    }
    for op in program.leaves() {
        let count = effects.get(&(id.clone(), op.id())).map_or(0, Vec::len);
        if count > 1 {
            report.violate(
                "no step body runs twice under kernel restarts",
                &id,
                format!(
                    "{label}: op {} ({:?}) ran {count} times",
                    op.id(),
                    op.effect_kind()
                ),
            );
        }
    }
}

impl Inputs<'_> {
    /// Executions spawned by `parent` (the driver indexes them from the kernel's list).
    fn kernel_children(&self, parent: &str) -> Vec<String> {
        self.children.get(parent).cloned().unwrap_or_default()
    }
}

/// No settle call of a superseded attempt was accepted.
fn check_fencing(inputs: &Inputs<'_>, report: &mut Report) {
    for call in inputs.ledger.settles() {
        let accepted = (200..300).contains(&call.status)
            && (call.kind.starts_with("execution.") || call.decision == "recorded");
        *report
            .settles
            .entry(format!("{} {} {}", call.kind, call.status, call.decision))
            .or_default() += 1;
        let superseded =
            inputs
                .ledger
                .superseding_claim(&call.dispatch_id, call.attempt, call.sent_at);
        if !accepted {
            if superseded.is_some() {
                report.fenced += 1;
            }
            continue;
        }
        if let Some(claim) =
            inputs
                .ledger
                .superseding_claim(&call.dispatch_id, call.attempt, call.sent_at)
        {
            report.violate(
                "no settle from a superseded lease is accepted",
                &claim.execution_id,
                format!(
                    "{} {} (slot {}) with attempt {} answered {} {:?}, sent {:?} after attempt {} was claimed",
                    call.kind,
                    call.path,
                    call.slot,
                    call.attempt,
                    call.status,
                    call.decision,
                    call.sent_at.saturating_duration_since(claim.seen_at),
                    claim.attempt
                ),
            );
        }
    }
}
