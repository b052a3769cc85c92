//! Policy bundles: [`Client::set_policy`] stores an agent's bundle, [`Client::test_policy`]
//! checks a bundle against hand-written cases or against the steps executions recorded.

use http::Method;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Client, encode};
use crate::error::Result;
use crate::kernel::{Replayable, encode_segment};

/// What a policy decides about a step.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PolicyDecision {
    /// The step runs.
    Allow,
    /// The step is refused.
    Deny,
    /// The step waits for a person's decision.
    RequireApproval,
    /// A decision this SDK does not know (and a [`Default`] record's).
    #[default]
    #[serde(other)]
    Unknown,
}

/// One step to ask a policy about, with what the answer should be. Build one with
/// [`tool_call`](Self::tool_call), [`llm_call`](Self::llm_call) or [`local`](Self::local);
/// the cases of a [`PolicyReport`] replayed from an execution also name their step.
///
/// ```
/// use rebuno::client::{PolicyCase, PolicyDecision};
/// let case = PolicyCase::tool_call("shell_exec")
///     .name("no shell")
///     .args(serde_json::json!({"cmd": "ls"}))
///     .expect(PolicyDecision::Deny)
///     .expect_rule("no-shell");
/// assert_eq!(case.kind, "tool_call");
/// ```
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PolicyCase {
    /// A name for the report (may be empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The agent the step belongs to; the tested agent when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub agent_id: String,
    /// `tool_call`, `llm_call` or `local`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// The tool, model or local step name.
    #[serde(default)]
    pub target: String,
    /// The step's arguments, for rules that match on them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    /// The decision the case expects; none checks nothing. A replayed case expects what
    /// the kernel decided when the step ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<PolicyDecision>,
    /// The rule the case expects to decide (`default` for the bundle's default action).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub expect_rule: String,
    /// The execution a replayed case comes from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub execution_id: String,
    /// The step a replayed case comes from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub step_id: String,
    /// The rule that decided a replayed step when it ran.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub was_rule: String,
}

impl PolicyCase {
    /// A call of the tool `tool_id`.
    pub fn tool_call(tool_id: impl Into<String>) -> Self {
        Self::of_kind("tool_call", tool_id.into())
    }

    /// A call of the model `model`.
    pub fn llm_call(model: impl Into<String>) -> Self {
        Self::of_kind("llm_call", model.into())
    }

    /// A local step named `name`.
    pub fn local(name: impl Into<String>) -> Self {
        Self::of_kind("local", name.into())
    }

    fn of_kind(kind: &str, target: String) -> Self {
        Self {
            kind: kind.to_owned(),
            target,
            ..Self::default()
        }
    }

    /// Names the case in the report.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The step's arguments.
    pub fn args(mut self, args: Value) -> Self {
        self.args = Some(args);
        self
    }

    /// The decision the case expects.
    pub fn expect(mut self, decision: PolicyDecision) -> Self {
        self.expect = Some(decision);
        self
    }

    /// The rule the case expects to decide.
    pub fn expect_rule(mut self, rule_id: impl Into<String>) -> Self {
        self.expect_rule = rule_id.into();
        self
    }
}

/// Which of an agent's recorded executions [`TestPolicy::executions`] replays: the newest
/// first, 100 by default.
///
/// ```
/// let recent = rebuno::client::ExecutionSelector::default()
///     .session("chat:u1")
///     .since("2026-11-01T00:00:00Z")
///     .limit(20);
/// # let _ = recent;
/// ```
#[derive(Debug, Default, Clone, Serialize)]
pub struct ExecutionSelector {
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    since: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<u32>,
}

impl ExecutionSelector {
    /// Only executions of this session.
    pub fn session(mut self, session: impl Into<String>) -> Self {
        self.session = Some(session.into());
        self
    }

    /// Only executions created at or after this time (RFC 3339).
    pub fn since(mut self, rfc3339: impl Into<String>) -> Self {
        self.since = Some(rfc3339.into());
        self
    }

    /// At most this many executions (the kernel takes at most 1000).
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }
}

/// One case of a [`PolicyReport`]: what the bundle decided, and whether that is what the
/// case expected.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PolicyCaseResult {
    /// The case, with the agent and kind the kernel filled in.
    #[serde(flatten)]
    pub case: PolicyCase,
    /// What the bundle decided.
    pub decision: PolicyDecision,
    /// The rule that decided (`default` for the default action).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rule_id: String,
    /// The rule's reason, if it gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Whether the decision (and rule) are what the case expected.
    pub pass: bool,
    /// What it got against what it expected, when it failed: `deny, want allow`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// The answer of [`TestPolicy::send`]: every case's result, how many failed, and which
/// rules no case reached. `Display` lists the failures, for `assert!(report.passed(),
/// "{report}")`.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PolicyReport {
    /// Each case's result, in order.
    #[serde(default)]
    pub results: Vec<PolicyCaseResult>,
    /// How many cases failed.
    #[serde(default)]
    pub failed: usize,
    /// The bundle's rules no case reached, in bundle order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unexercised_rules: Vec<String>,
}

impl PolicyReport {
    /// Whether every case met its expectations.
    pub fn passed(&self) -> bool {
        self.failed == 0
    }
}

impl std::fmt::Display for PolicyReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let total = self.results.len();
        let passed = total.saturating_sub(self.failed);
        writeln!(f, "policy test: {passed} of {total} cases passed")?;
        for result in self.results.iter().filter(|r| !r.pass) {
            let case = &result.case;
            let name = if case.name.is_empty() {
                &case.target
            } else {
                &case.name
            };
            let failure = result.failure.as_deref().unwrap_or_default();
            writeln!(f, "  FAIL {name}: {failure}")?;
        }
        if !self.unexercised_rules.is_empty() {
            let rules = self.unexercised_rules.join(", ");
            writeln!(f, "  rules no case reached: {rules}")?;
        }
        Ok(())
    }
}

impl Client {
    /// Compiles and stores `agent_id`'s policy bundle (YAML), replacing the one it had; its
    /// next steps are checked against it.
    ///
    /// ```no_run
    /// # async fn demo(client: rebuno::client::Client) -> rebuno::Result<()> {
    /// let bundle = std::fs::read_to_string("policies/researcher.yaml").unwrap_or_default();
    /// client.set_policy("researcher", &bundle).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `validation_error` naming what does not compile; `not_found` for an unknown agent;
    /// `forbidden` without `policies:write`; network errors.
    pub async fn set_policy(&self, agent_id: &str, bundle: &str) -> Result<()> {
        let path = format!("/v0/policies/{}", encode_segment(agent_id));
        let body = serde_json::json!({ "bundle": bundle });
        self.send(Method::POST, &path, Some(encode(&body)?), Replayable::Yes)
            .await
            .map(drop)
    }

    /// Starts testing a policy bundle of `agent_id` (its stored one unless
    /// [`TestPolicy::bundle`] gives another) against hand-written [cases](TestPolicy::case),
    /// one recorded [execution](TestPolicy::execution), or the agent's recorded
    /// [executions](TestPolicy::executions); finish with [`TestPolicy::send`]. Nothing runs
    /// and nothing is stored: a CI job checks a bundle before [`set_policy`](Self::set_policy).
    ///
    /// ```no_run
    /// # async fn demo(client: rebuno::client::Client, bundle: &str) -> rebuno::Result<()> {
    /// use rebuno::client::ExecutionSelector;
    /// // Would the new bundle have decided last week's steps as the old one did?
    /// let report = client
    ///     .test_policy("researcher")
    ///     .bundle(bundle)
    ///     .executions(ExecutionSelector::default().since("2026-11-24T00:00:00Z"))
    ///     .send()
    ///     .await?;
    /// for result in report.results.iter().filter(|r| !r.pass) {
    ///     println!("{} {}: {:?}", result.case.execution_id, result.case.target, result.failure);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn test_policy(&self, agent_id: impl Into<String>) -> TestPolicy {
        TestPolicy {
            client: self.clone(),
            agent_id: agent_id.into(),
            body: TestBody::default(),
        }
    }
}

/// A policy test being sent; finish with [`send`](Self::send). See [`Client::test_policy`].
///
/// The kernel tests one source of cases per request: of [`case`](Self::case),
/// [`execution`](Self::execution) and [`executions`](Self::executions), the last one called
/// decides.
#[derive(Debug)]
#[must_use = "call `send()` to test the policy"]
pub struct TestPolicy {
    client: Client,
    agent_id: String,
    body: TestBody,
}

/// The body of `POST /v0/policies/{agent_id}/test`.
#[derive(Debug, Default, Serialize)]
struct TestBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    bundle: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    cases: Vec<PolicyCase>,
    #[serde(skip_serializing_if = "Option::is_none")]
    execution_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    executions: Option<ExecutionSelector>,
}

impl TestPolicy {
    /// Tests this bundle (YAML) instead of the agent's stored one.
    pub fn bundle(mut self, yaml: impl Into<String>) -> Self {
        self.body.bundle = Some(yaml.into());
        self
    }

    /// Adds a hand-written case.
    pub fn case(mut self, case: PolicyCase) -> Self {
        self.body.execution_id = None;
        self.body.executions = None;
        self.body.cases.push(case);
        self
    }

    /// Tests the steps one execution recorded, each expecting the decision it got then.
    pub fn execution(mut self, execution_id: impl Into<String>) -> Self {
        self.body.cases.clear();
        self.body.executions = None;
        self.body.execution_id = Some(execution_id.into());
        self
    }

    /// Tests the steps of the agent's recorded executions `selector` picks, each expecting
    /// the decision it got then.
    pub fn executions(mut self, selector: ExecutionSelector) -> Self {
        self.body.cases.clear();
        self.body.execution_id = None;
        self.body.executions = Some(selector);
        self
    }

    /// Runs the test; a case that fails is in the report, not an error.
    ///
    /// # Errors
    ///
    /// `validation_error` for a bundle that does not compile, an agent without a stored
    /// bundle when none is given, or a case without a target or with an unknown kind;
    /// `not_found` for an unknown agent or execution; `forbidden` without `policies:write`
    /// and `executions:read`; network errors.
    pub async fn send(self) -> Result<PolicyReport> {
        let path = format!("/v0/policies/{}/test", encode_segment(&self.agent_id));
        self.client.write(&path, &self.body).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_source_of_cases_decides() {
        let kernel = super::super::fake::FakeKernel::answering(http::StatusCode::OK, "{}");
        let client = kernel.client();
        let replay = client
            .test_policy("a")
            .case(PolicyCase::local("roll_dice"))
            .execution("e1");
        let body = serde_json::to_value(&replay.body).unwrap();
        assert_eq!(body, serde_json::json!({"execution_id": "e1"}));
        let cases = replay.executions(ExecutionSelector::default().limit(5));
        let cases = cases.case(PolicyCase::local("roll_dice"));
        let body = serde_json::to_value(&cases.body).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"cases": [{"kind": "local", "target": "roll_dice"}]})
        );
    }

    #[test]
    fn a_report_decodes_with_its_cases() {
        let report: PolicyReport = serde_json::from_str(
            r#"{"results":[{"name":"n","agent_id":"a","kind":"tool_call","target":"t","expect":"allow","decision":"require_approval","rule_id":"r","pass":false,"failure":"require_approval, want allow"}],"failed":1}"#,
        )
        .unwrap();
        assert!(!report.passed());
        let result = &report.results[0];
        assert_eq!(result.decision, PolicyDecision::RequireApproval);
        assert_eq!(result.case.expect, Some(PolicyDecision::Allow));
        assert_eq!(result.case.target, "t");
    }
}
