//! `POST /v0/policies/{agent_id}/test` (PROTOCOL.md §2.7): evaluate a bundle against
//! hand-written cases, or against the steps an execution (or a selection of the agent's
//! executions) actually recorded, and report mismatches.

mod replay;

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::Kernel;
use crate::error::KernelError;
use crate::policy::{Action, Policy, StepFacts};

/// Cases taken from recorded executions by default, and at most.
const SELECT_DEFAULT: usize = 100;
const SELECT_MAX: usize = 1000;

/// The request body.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PolicyTestRequest {
    #[serde(default)]
    pub(crate) bundle: Option<String>,
    #[serde(default)]
    pub(crate) cases: Option<Vec<Case>>,
    #[serde(default)]
    pub(crate) execution_id: Option<Uuid>,
    #[serde(default)]
    pub(crate) executions: Option<Selector>,
}

/// Which of the agent's executions to replay.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Selector {
    #[serde(default)]
    pub(crate) session: Option<String>,
    #[serde(default)]
    pub(crate) since: Option<crate::model::Timestamp>,
    #[serde(default)]
    pub(crate) limit: Option<i64>,
}

/// One test case; replayed cases also name their step and the rule that decided it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Case {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) agent_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) kind: String,
    #[serde(default)]
    pub(crate) target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) args: Option<Value>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) expect: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) expect_rule: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) execution_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) step_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) was_rule: String,
}

/// One evaluated case of a [`PolicyReport`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CaseResult {
    #[serde(flatten)]
    case: Case,
    decision: &'static str,
    #[serde(skip_serializing_if = "String::is_empty")]
    rule_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    pass: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    failure: Option<String>,
}

/// A policy test: every case's result, how many failed, which rules no case reached.
///
/// ```
/// use rebuno_devkernel::Policy;
///
/// let policy = Policy::parse("default_action: deny\nrules:\n  - id: reads\n    when: {target: search}\n    then: {decision: allow}\n")?;
/// let report = policy.test_cases("agent_id: researcher\ncases:\n  - {name: search, target: search, expect: allow}\n  - {name: shell, target: shell_exec, expect: deny, expect_rule: default}\n")?;
/// assert!(report.passed(), "{report}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyReport {
    results: Vec<CaseResult>,
    failed: usize,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    unexercised_rules: Vec<String>,
}

const KINDS: [&str; 3] = ["tool_call", "llm_call", "local"];
const DECISIONS: [&str; 3] = ["allow", "deny", "require_approval"];

/// Fills defaults (agent, `tool_call`) and rejects unknown kinds and expectations.
fn normalize(cases: &mut [Case], agent_id: &str) -> Result<(), KernelError> {
    for (i, case) in cases.iter_mut().enumerate() {
        let n = i + 1;
        if case.target.is_empty() {
            return Err(KernelError::validation(format!("case {n}: missing target")));
        }
        if case.agent_id.is_empty() {
            agent_id.clone_into(&mut case.agent_id);
        }
        if case.kind.is_empty() {
            "tool_call".clone_into(&mut case.kind);
        }
        if !KINDS.contains(&case.kind.as_str()) {
            return Err(KernelError::validation(format!(
                "case {n}: unknown kind {:?}",
                case.kind
            )));
        }
        if !case.expect.is_empty() && !DECISIONS.contains(&case.expect.as_str()) {
            return Err(KernelError::validation(format!(
                "case {n}: unknown expect {:?}",
                case.expect
            )));
        }
    }
    Ok(())
}

/// Evaluates one case.
fn evaluate(policy: &Policy, case: Case) -> CaseResult {
    let facts = StepFacts {
        agent_id: &case.agent_id,
        kind: &case.kind,
        target: &case.target,
        args: case.args.as_ref().unwrap_or(&Value::Null),
    };
    let verdict = policy.evaluate(&facts);
    let decision = match verdict.action {
        Action::Allow => "allow",
        Action::Deny => "deny",
        Action::RequireApproval(_) => "require_approval",
    };
    let failure = if !case.expect.is_empty() && case.expect != decision {
        Some(format!("{decision}, want {}", case.expect))
    } else if !case.expect_rule.is_empty() && case.expect_rule != verdict.rule_id {
        Some(format!(
            "rule {}, want {}",
            verdict.rule_id, case.expect_rule
        ))
    } else {
        None
    };
    CaseResult {
        case,
        decision,
        rule_id: verdict.rule_id,
        reason: verdict.reason,
        pass: failure.is_none(),
        failure,
    }
}

/// Runs every case and lists the rules none of them reached.
fn run(policy: &Policy, cases: Vec<Case>) -> PolicyReport {
    let results: Vec<CaseResult> = cases.into_iter().map(|c| evaluate(policy, c)).collect();
    let hit: BTreeSet<&str> = results.iter().map(|r| r.rule_id.as_str()).collect();
    PolicyReport {
        failed: results.iter().filter(|r| !r.pass).count(),
        unexercised_rules: policy
            .rule_ids()
            .filter(|id| !hit.contains(id))
            .map(str::to_owned)
            .collect(),
        results,
    }
}

impl Kernel {
    /// Tests a bundle (the given one, else the agent's) against cases.
    pub(crate) fn test_policy(
        &self,
        agent_id: &str,
        request: PolicyTestRequest,
    ) -> Result<PolicyReport, KernelError> {
        let agent = self
            .store()
            .agent(agent_id)
            .ok_or_else(|| KernelError::not_found("agent"))?;
        let policy = match request.bundle.as_deref().filter(|b| !b.is_empty()) {
            Some(yaml) => Policy::parse(yaml)
                .map_err(|e| KernelError::validation(format!("invalid policy bundle: {e}")))?,
            None => agent.policy.as_deref().cloned().ok_or_else(|| {
                KernelError::validation(format!("agent {agent_id:?} has no policy bundle"))
            })?,
        };
        let mut cases = if let Some(id) = request.execution_id {
            self.replay_cases(id)?
        } else if let Some(selector) = &request.executions {
            self.backtest_cases(agent_id, selector)
        } else {
            request.cases.unwrap_or_default()
        };
        normalize(&mut cases, agent_id)?;
        Ok(run(&policy, cases))
    }
}

/// A `*.policytest.yaml` file, as the Go kernel's `rebuno policy test` reads it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CasesFile {
    #[serde(default)]
    agent_id: String,
    #[serde(default)]
    cases: Vec<Case>,
}

impl Policy {
    /// Runs the cases of a `*.policytest.yaml` file (`agent_id`, then `cases` with `name`,
    /// `kind`, `target`, `args`, `expect` and `expect_rule`, the Go kernel's format) against
    /// this bundle, so the cases kept beside a bundle run from `cargo test`.
    ///
    /// # Errors
    ///
    /// [`KernelError`] (validation) when the file does not parse, a case has no target, or
    /// names an unknown kind or decision.
    pub fn test_cases(&self, cases_yaml: &str) -> Result<PolicyReport, KernelError> {
        let file: CasesFile = serde_yaml::from_str(cases_yaml)
            .map_err(|e| KernelError::validation(format!("invalid policy test cases: {e}")))?;
        let mut cases = file.cases;
        normalize(&mut cases, &file.agent_id)?;
        Ok(run(self, cases))
    }
}

impl PolicyReport {
    /// Whether every case met its expectations.
    pub fn passed(&self) -> bool {
        self.failed == 0
    }

    /// Every case's result, in order.
    pub fn results(&self) -> &[CaseResult] {
        &self.results
    }

    /// How many cases failed.
    pub fn failed(&self) -> usize {
        self.failed
    }

    /// Rules no case reached, in file order.
    pub fn unexercised_rules(&self) -> &[String] {
        &self.unexercised_rules
    }
}

impl CaseResult {
    /// The case's name (or empty).
    pub fn name(&self) -> &str {
        &self.case.name
    }

    /// The target it asked about.
    pub fn target(&self) -> &str {
        &self.case.target
    }

    /// `allow`, `deny` or `require_approval`.
    pub fn decision(&self) -> &str {
        self.decision
    }

    /// The rule that decided (`default` for the default action).
    pub fn rule_id(&self) -> &str {
        &self.rule_id
    }

    /// Whether it met its expectations.
    pub fn pass(&self) -> bool {
        self.pass
    }

    /// What it got against what it expected, when it failed.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }
}

impl std::fmt::Display for PolicyReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let total = self.results.len();
        writeln!(
            f,
            "policy test: {} of {total} cases passed",
            total - self.failed
        )?;
        for result in self.results.iter().filter(|r| !r.pass) {
            let name = if result.case.name.is_empty() {
                &result.case.target
            } else {
                &result.case.name
            };
            writeln!(
                f,
                "  FAIL {name}: {}",
                result.failure.as_deref().unwrap_or_default()
            )?;
        }
        if !self.unexercised_rules.is_empty() {
            writeln!(
                f,
                "  rules no case reached: {}",
                self.unexercised_rules.join(", ")
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(target: &str, expect: &str) -> Case {
        Case {
            target: target.into(),
            expect: expect.into(),
            ..Case::default()
        }
    }

    #[test]
    fn reports_mismatches_and_unexercised_rules() {
        let policy = Policy::parse(
            "default_action: deny\nrules:\n  - id: search\n    when: {target: search}\n    then: {decision: allow}\n  - id: never\n    when: {target: nothing}\n    then: {decision: deny}\n",
        )
        .unwrap();
        let mut cases = vec![case("search", "allow"), case("rm", "allow")];
        normalize(&mut cases, "a").unwrap();
        let report = run(&policy, cases);
        assert_eq!(report.failed, 1);
        assert_eq!(
            report.results[1].failure.as_deref(),
            Some("deny, want allow")
        );
        assert_eq!(report.results[1].rule_id, "default");
        assert_eq!(report.unexercised_rules, ["never"]);
        assert!(normalize(&mut [case("", "")], "a").is_err());
        assert!(normalize(&mut [case("x", "maybe")], "a").is_err());
    }
}
