//! `POST /v0/policies/{agent_id}/test` (PROTOCOL.md §2.7): evaluate a bundle against
//! hand-written cases, or against the steps an execution (or a selection of the agent's
//! executions) actually recorded, and report mismatches.

mod replay;

use std::collections::BTreeSet;

use rebuno::client::{PolicyCase, PolicyCaseResult, PolicyDecision, PolicyReport};
use serde::Deserialize;
use serde_json::{Map, Value};
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
    pub(crate) cases: Option<Vec<Map<String, Value>>>,
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

/// The fields a case may have (others are refused, as the Go kernel does).
const FIELDS: [&str; 10] = [
    "name",
    "agent_id",
    "kind",
    "target",
    "args",
    "expect",
    "expect_rule",
    "execution_id",
    "step_id",
    "was_rule",
];
const KINDS: [&str; 3] = ["tool_call", "llm_call", "local"];
const DECISIONS: [(PolicyDecision, &str); 3] = [
    (PolicyDecision::Allow, "allow"),
    (PolicyDecision::Deny, "deny"),
    (PolicyDecision::RequireApproval, "require_approval"),
];

/// The wire name of a decision.
fn wire_name(decision: PolicyDecision) -> &'static str {
    DECISIONS
        .iter()
        .find(|(known, _)| *known == decision)
        .map_or("", |(_, name)| name)
}

/// Case `n` as a request or a cases file writes it, read strictly: an unknown field or
/// `expect` is an error; an empty `expect` expects nothing.
fn read(n: usize, mut case: Map<String, Value>) -> Result<PolicyCase, KernelError> {
    if let Some(field) = case.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        let message = format!("case {n}: unknown field {field:?}");
        return Err(KernelError::validation(message));
    }
    match case.get("expect") {
        Some(Value::String(expect)) if expect.is_empty() => drop(case.remove("expect")),
        Some(Value::String(expect)) if DECISIONS.iter().any(|(_, name)| name == expect) => {}
        Some(other) => {
            let message = format!("case {n}: unknown expect {other}");
            return Err(KernelError::validation(message));
        }
        None => {}
    }
    serde_json::from_value(Value::Object(case))
        .map_err(|e| KernelError::validation(format!("case {n}: {e}")))
}

/// Reads every case (see [`read`]).
fn read_all(cases: Vec<Map<String, Value>>) -> Result<Vec<PolicyCase>, KernelError> {
    let numbered = cases.into_iter().enumerate();
    numbered.map(|(i, case)| read(i + 1, case)).collect()
}

/// Fills defaults (agent, `tool_call`) and rejects missing targets and unknown kinds.
fn normalize(cases: &mut [PolicyCase], agent_id: &str) -> Result<(), KernelError> {
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
    }
    Ok(())
}

/// Evaluates one case.
fn evaluate(policy: &Policy, case: PolicyCase) -> PolicyCaseResult {
    let facts = StepFacts {
        agent_id: &case.agent_id,
        kind: &case.kind,
        target: &case.target,
        args: case.args.as_ref().unwrap_or(&Value::Null),
    };
    let verdict = policy.evaluate(&facts);
    let decision = match verdict.action {
        Action::Allow => PolicyDecision::Allow,
        Action::Deny => PolicyDecision::Deny,
        Action::RequireApproval(_) => PolicyDecision::RequireApproval,
    };
    let mut result = PolicyCaseResult::default();
    let (rule, want_rule) = (&verdict.rule_id, &case.expect_rule);
    result.failure = match case.expect {
        Some(want) if want != decision => {
            Some(format!("{}, want {}", wire_name(decision), wire_name(want)))
        }
        _ if !want_rule.is_empty() && want_rule != rule => {
            Some(format!("rule {rule}, want {want_rule}"))
        }
        _ => None,
    };
    result.pass = result.failure.is_none();
    result.case = case;
    result.decision = decision;
    result.rule_id = verdict.rule_id;
    result.reason = verdict.reason;
    result
}

/// Runs every case and lists the rules none of them reached.
fn run(policy: &Policy, cases: Vec<PolicyCase>) -> PolicyReport {
    let mut report = PolicyReport::default();
    report.results = cases.into_iter().map(|c| evaluate(policy, c)).collect();
    report.failed = report.results.iter().filter(|r| !r.pass).count();
    let hit: BTreeSet<&str> = report.results.iter().map(|r| r.rule_id.as_str()).collect();
    let unexercised = policy.rule_ids().filter(|id| !hit.contains(id));
    report.unexercised_rules = unexercised.map(str::to_owned).collect();
    report
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
            read_all(request.cases.unwrap_or_default())?
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
    cases: Vec<Map<String, Value>>,
}

impl Policy {
    /// Runs the cases of a `*.policytest.yaml` file (`agent_id`, then `cases` with `name`,
    /// `kind`, `target`, `args`, `expect` and `expect_rule`, the Go kernel's format) against
    /// this bundle, so the cases kept beside a bundle run from `cargo test`.
    ///
    /// ```
    /// use rebuno_devkernel::Policy;
    ///
    /// let policy = Policy::parse("default_action: deny\nrules:\n  - id: reads\n    when: {target: search}\n    then: {decision: allow}\n")?;
    /// let report = policy.test_cases("agent_id: researcher\ncases:\n  - {name: search, target: search, expect: allow}\n  - {name: shell, target: shell_exec, expect: deny, expect_rule: default}\n")?;
    /// assert!(report.passed(), "{report}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`KernelError`] (validation) when the file does not parse, a case has no target, or
    /// names an unknown kind or decision.
    pub fn test_cases(&self, cases_yaml: &str) -> Result<PolicyReport, KernelError> {
        let file: CasesFile = serde_yaml::from_str(cases_yaml)
            .map_err(|e| KernelError::validation(format!("invalid policy test cases: {e}")))?;
        let mut cases = read_all(file.cases)?;
        normalize(&mut cases, &file.agent_id)?;
        Ok(run(self, cases))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(target: &str, expect: &str) -> Result<PolicyCase, KernelError> {
        let case = serde_json::json!({"target": target, "expect": expect});
        read(1, case.as_object().cloned().unwrap_or_default())
    }

    #[test]
    fn reports_mismatches_and_unexercised_rules() {
        let policy = Policy::parse(
            "default_action: deny\nrules:\n  - id: search\n    when: {target: search}\n    then: {decision: allow}\n  - id: never\n    when: {target: nothing}\n    then: {decision: deny}\n",
        )
        .unwrap();
        let mut cases = vec![
            case("search", "allow").unwrap(),
            case("rm", "allow").unwrap(),
        ];
        normalize(&mut cases, "a").unwrap();
        let report = run(&policy, cases);
        assert_eq!(report.failed, 1);
        assert_eq!(
            report.results[1].failure.as_deref(),
            Some("deny, want allow")
        );
        assert_eq!(report.results[1].rule_id, "default");
        assert_eq!(report.unexercised_rules, ["never"]);
        assert_eq!(case("x", "").unwrap().expect, None);
        assert!(normalize(&mut [case("", "").unwrap()], "a").is_err());
        let error = case("x", "maybe").unwrap_err().to_string();
        assert!(
            error.contains(r#"case 1: unknown expect "maybe""#),
            "{error}"
        );
        let typo = serde_json::json!({"target": "x", "expects": "allow"});
        assert!(read(1, typo.as_object().cloned().unwrap_or_default()).is_err());
    }
}
