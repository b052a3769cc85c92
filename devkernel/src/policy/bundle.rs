//! Loading a YAML bundle into compiled rules.

use std::collections::{BTreeMap, HashSet};

use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

use super::duration::parse_go_duration;
use super::glob::glob_match;
use super::{Action, ApprovalConfig, Budget, BudgetScope, RateLimit, RateScope, StepFacts};

/// Why a bundle does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid policy bundle: {0}")]
pub struct PolicyError(String);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBundle {
    #[serde(default)]
    default_action: Option<String>,
    #[serde(default)]
    rules: Vec<RawRule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    #[serde(default)]
    id: String,
    /// Accepted for bundles written for older kernels; rules run in file order.
    #[serde(default)]
    #[allow(dead_code)]
    priority: Option<i64>,
    #[serde(default)]
    when: RawWhen,
    then: RawThen,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWhen {
    #[serde(default)]
    target: Option<String>,
    #[serde(default)]
    targets: Option<Vec<String>>,
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    agent_ids: Option<Vec<String>>,
    #[serde(default)]
    step_kind: Option<String>,
    #[serde(default)]
    arguments: Option<BTreeMap<String, RawMatcher>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMatcher {
    #[serde(default)]
    equals: Option<serde_yaml::Value>,
    #[serde(default)]
    contains: Option<serde_yaml::Value>,
    #[serde(default)]
    one_of: Option<Vec<serde_yaml::Value>>,
    #[serde(default)]
    regex: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawThen {
    decision: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    approval_config: Option<RawApproval>,
    #[serde(default)]
    rate_limit: Option<RawRateLimit>,
    #[serde(default)]
    budget: Option<RawBudget>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimit {
    max_calls: u32,
    window: String,
    #[serde(default)]
    per_what: Option<String>,
    #[serde(default)]
    max_wait: Option<String>,
    /// The in-memory limiter never fails, so this has no effect here.
    #[serde(default)]
    #[allow(dead_code)]
    on_limiter_error: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBudget {
    max_tokens: u64,
    #[serde(default)]
    on_exceed: Option<String>,
    /// `execution` (default) or `session`.
    #[serde(default)]
    scope: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApproval {
    #[serde(default)]
    approvers: Option<Vec<String>>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

/// A compiled bundle.
#[derive(Debug, Clone)]
pub(super) struct Bundle {
    pub(super) default_allow: bool,
    pub(super) rules: Vec<Rule>,
}

/// A compiled rule.
#[derive(Debug, Clone)]
pub(super) struct Rule {
    pub(super) id: String,
    pub(super) when: When,
    pub(super) action: Action,
    pub(super) reason: Option<String>,
    pub(super) rate_limit: Option<RateLimit>,
    pub(super) budget: Option<Budget>,
}

/// Conditions of a rule; every present one must hold.
#[derive(Debug, Clone, Default)]
pub(super) struct When {
    targets: Option<Vec<String>>,
    agent_ids: Option<Vec<String>>,
    step_kind: Option<String>,
    arguments: Vec<(String, Matcher)>,
}

#[derive(Debug, Clone)]
enum Matcher {
    Equals(String),
    Contains(String),
    OneOf(Vec<String>),
    Regex(Regex),
}

impl Bundle {
    pub(super) fn parse(yaml: &str) -> Result<Self, PolicyError> {
        let raw: RawBundle = if yaml.trim().is_empty() {
            RawBundle {
                default_action: None,
                rules: Vec::new(),
            }
        } else {
            serde_yaml::from_str(yaml).map_err(|e| PolicyError(e.to_string()))?
        };
        let mut seen = HashSet::new();
        let mut rules = Vec::with_capacity(raw.rules.len());
        for rule in raw.rules {
            if rule.id.trim().is_empty() {
                return Err(PolicyError("every rule needs an id".into()));
            }
            if !seen.insert(rule.id.clone()) {
                return Err(PolicyError(format!("duplicate rule id {:?}", rule.id)));
            }
            rules.push(compile_rule(rule)?);
        }
        Ok(Self {
            default_allow: raw.default_action.as_deref() == Some("allow"),
            rules,
        })
    }
}

fn compile_rule(rule: RawRule) -> Result<Rule, PolicyError> {
    let action = match rule.then.decision.as_str() {
        "allow" => Action::Allow,
        // No external judge in the dev kernel: judge rules deny, as without an API key.
        "deny" | "judge" => Action::Deny,
        "require_approval" => Action::RequireApproval(compile_approval(rule.then.approval_config)?),
        other => {
            return Err(PolicyError(format!(
                "rule {:?}: unknown decision {other:?}",
                rule.id
            )));
        }
    };
    let rate_limit = match rule.then.rate_limit {
        Some(raw) => Some(compile_rate_limit(raw, &rule.id)?),
        None => None,
    };
    let budget = match rule.then.budget {
        Some(raw) => Some(compile_budget(raw, &rule.id)?),
        None => None,
    };
    Ok(Rule {
        rate_limit,
        budget,
        when: compile_when(rule.when, &rule.id)?,
        id: rule.id,
        action,
        reason: rule.then.reason.filter(|r| !r.is_empty()),
    })
}

fn duration(text: &str, rule: &str, what: &str) -> Result<std::time::Duration, PolicyError> {
    parse_go_duration(text)
        .ok_or_else(|| PolicyError(format!("rule {rule:?}: invalid {what} {text:?}")))
}

fn compile_rate_limit(raw: RawRateLimit, rule: &str) -> Result<RateLimit, PolicyError> {
    let window = duration(&raw.window, rule, "rate_limit.window")?;
    if raw.max_calls == 0 || window.is_zero() {
        return Err(PolicyError(format!(
            "rule {rule:?}: rate_limit needs max_calls and window"
        )));
    }
    let scope = match raw.per_what.as_deref().unwrap_or("execution") {
        "execution" | "" => RateScope::Execution,
        "agent" => RateScope::Agent,
        "session" => RateScope::Session,
        "global" => RateScope::Global,
        other => {
            return Err(PolicyError(format!(
                "rule {rule:?}: unknown per_what {other:?}"
            )));
        }
    };
    let max_wait = match raw.max_wait.as_deref().filter(|w| !w.is_empty()) {
        Some(text) => Some(duration(text, rule, "rate_limit.max_wait")?),
        None => None,
    };
    Ok(RateLimit {
        max_calls: raw.max_calls,
        window,
        scope,
        max_wait,
    })
}

fn compile_budget(raw: RawBudget, rule: &str) -> Result<Budget, PolicyError> {
    let approve = match raw.on_exceed.as_deref().unwrap_or("deny") {
        "deny" | "" => false,
        "require_approval" => true,
        other => {
            return Err(PolicyError(format!(
                "rule {rule:?}: unknown on_exceed {other:?}"
            )));
        }
    };
    let scope = match raw.scope.as_deref().unwrap_or("execution") {
        "execution" | "" => BudgetScope::Execution,
        "session" => BudgetScope::Session,
        other => {
            return Err(PolicyError(format!(
                "rule {rule:?}: unknown budget scope {other:?}"
            )));
        }
    };
    Ok(Budget {
        max_tokens: raw.max_tokens,
        approve,
        scope,
    })
}

fn compile_approval(raw: Option<RawApproval>) -> Result<ApprovalConfig, PolicyError> {
    let Some(raw) = raw else {
        return Ok(ApprovalConfig::default());
    };
    let timeout = match raw.timeout.as_deref().filter(|t| !t.is_empty()) {
        Some(text) => Some(
            parse_go_duration(text)
                .ok_or_else(|| PolicyError(format!("invalid approval timeout {text:?}")))?,
        ),
        None => None,
    };
    Ok(ApprovalConfig {
        approvers: raw.approvers.filter(|a| !a.is_empty()),
        timeout,
        message: raw.message.filter(|m| !m.is_empty()),
    })
}

fn compile_when(raw: RawWhen, rule: &str) -> Result<When, PolicyError> {
    let mut targets: Vec<String> = raw.target.into_iter().collect();
    targets.extend(raw.targets.unwrap_or_default());
    let mut agent_ids: Vec<String> = raw.agent_id.into_iter().collect();
    agent_ids.extend(raw.agent_ids.unwrap_or_default());
    let mut arguments = Vec::new();
    for (key, matcher) in raw.arguments.unwrap_or_default() {
        arguments.push((key, compile_matcher(matcher, rule)?));
    }
    Ok(When {
        targets: (!targets.is_empty()).then_some(targets),
        agent_ids: (!agent_ids.is_empty()).then_some(agent_ids),
        step_kind: raw.step_kind.filter(|k| !k.is_empty()),
        arguments,
    })
}

fn compile_matcher(raw: RawMatcher, rule: &str) -> Result<Matcher, PolicyError> {
    if let Some(value) = raw.equals {
        return Ok(Matcher::Equals(yaml_scalar(&value)));
    }
    if let Some(value) = raw.contains {
        return Ok(Matcher::Contains(yaml_scalar(&value)));
    }
    if let Some(values) = raw.one_of {
        return Ok(Matcher::OneOf(values.iter().map(yaml_scalar).collect()));
    }
    if let Some(pattern) = raw.regex {
        let regex = Regex::new(&pattern)
            .map_err(|e| PolicyError(format!("rule {rule:?}: bad regex: {e}")))?;
        return Ok(Matcher::Regex(regex));
    }
    Err(PolicyError(format!(
        "rule {rule:?}: an argument matcher needs equals, contains, one_of or regex"
    )))
}

fn yaml_scalar(value: &serde_yaml::Value) -> String {
    match value {
        serde_yaml::Value::String(s) => s.clone(),
        serde_yaml::Value::Bool(b) => b.to_string(),
        serde_yaml::Value::Number(n) => n.to_string(),
        serde_yaml::Value::Null => "<nil>".into(),
        other => serde_yaml::to_string(other)
            .unwrap_or_default()
            .trim()
            .to_owned(),
    }
}

impl When {
    pub(super) fn matches(&self, facts: &StepFacts<'_>) -> bool {
        if let Some(kind) = &self.step_kind
            && kind != facts.kind
        {
            return false;
        }
        if let Some(targets) = &self.targets
            && !targets.iter().any(|g| glob_match(g, facts.target))
        {
            return false;
        }
        if let Some(agents) = &self.agent_ids
            && !agents.iter().any(|a| a == facts.agent_id)
        {
            return false;
        }
        self.arguments.iter().all(|(key, matcher)| {
            facts
                .args
                .get(key)
                .is_some_and(|value| matcher.matches(&go_format(value)))
        })
    }
}

impl Matcher {
    fn matches(&self, text: &str) -> bool {
        match self {
            Self::Equals(want) => text == want,
            Self::Contains(part) => text.contains(part.as_str()),
            Self::OneOf(options) => options.iter().any(|o| o == text),
            Self::Regex(regex) => regex.is_match(text),
        }
    }
}

/// Go's `fmt.Sprintf("%v")` of a decoded JSON value (close enough for matching).
fn go_format(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 1e21 => format!("{f:.0}"),
            _ => n.to_string(),
        },
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(go_format).collect();
            format!("[{}]", parts.join(" "))
        }
        Value::Object(map) => {
            let parts: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{k}:{}", go_format(v)))
                .collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}
