//! Loading a YAML bundle into compiled rules.

use std::collections::{BTreeMap, HashSet};

use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

use super::duration::parse_go_duration;
use super::glob::Glob;
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
    regex: Option<serde_yaml::Value>,
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
    #[serde(default)]
    judge: Option<RawJudge>,
}

/// `then.judge`: options of an external judge. The dev kernel has none, so they are only
/// validated (as Go validates them at load).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJudge {
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    threshold: Option<f64>,
    #[serde(default)]
    fallback: Option<String>,
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
    /// `target`: this glob must match.
    target: Option<Glob>,
    /// `targets`: one of these globs must match.
    targets: Option<Vec<Glob>>,
    /// `agent_id`: the agent must be this one.
    agent_id: Option<String>,
    /// `agent_ids`: the agent must be one of these.
    agent_ids: Option<Vec<String>>,
    /// `step_kind`: the step must be of this kind.
    step_kind: Option<String>,
    /// `arguments`: each named argument must be present and meet its predicate.
    arguments: Vec<(String, Predicate)>,
}

/// The constraints on one argument; every present one must hold. Empty fields are absent,
/// and at least one is present.
#[derive(Debug, Clone, Default)]
struct Predicate {
    /// The value must be this text.
    equals: Option<String>,
    /// The value must contain this text.
    contains: Option<String>,
    /// The value must be one of these texts.
    one_of: Option<Vec<String>>,
    /// The value must match this regex (unanchored).
    regex: Option<Regex>,
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

/// Why a `judge` rule denies: the dev kernel has no judge configured.
const NO_JUDGE: &str = "judge not configured";

/// Compiles one rule: its decision and options, then its conditions.
fn compile_rule(rule: RawRule) -> Result<Rule, PolicyError> {
    let judged = rule.then.decision == "judge";
    let action = match rule.then.decision.as_str() {
        "allow" => Action::Allow,
        // No judge here, so a judge rule denies whatever its fallback (Go without a judge).
        "deny" | "judge" => Action::Deny,
        "require_approval" => Action::RequireApproval(compile_approval(rule.then.approval_config)?),
        other => {
            return Err(PolicyError(format!(
                "rule {:?}: unknown decision {other:?}",
                rule.id
            )));
        }
    };
    check_judge(rule.then.judge.as_ref(), judged, &rule.id)?;
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
        reason: if judged {
            Some(NO_JUDGE.to_owned())
        } else {
            rule.then.reason.filter(|r| !r.is_empty())
        },
    })
}

/// Validates a `judge` block: its fallback is a decision, its threshold lies in 0..=1, and a
/// block that sets anything belongs to a `decision: judge` rule.
fn check_judge(raw: Option<&RawJudge>, judged: bool, rule: &str) -> Result<(), PolicyError> {
    let Some(raw) = raw else {
        return Ok(());
    };
    let fallback = raw.fallback.as_deref().unwrap_or_default();
    if !matches!(fallback, "" | "allow" | "deny" | "require_approval") {
        return Err(PolicyError(format!(
            "rule {rule:?}: unknown fallback {fallback:?} (allow, deny or require_approval)"
        )));
    }
    let threshold = raw.threshold.unwrap_or_default();
    let set = !fallback.is_empty()
        || threshold != 0.0
        || raw.instructions.as_deref().is_some_and(|i| !i.is_empty());
    if set && !judged {
        return Err(PolicyError(format!(
            "rule {rule:?}: judge is set on a rule whose decision is not judge"
        )));
    }
    // NaN compares false both ways, so Go lets it through; so does this check.
    if !(threshold.is_nan() || (0.0..=1.0).contains(&threshold)) {
        return Err(PolicyError(format!(
            "rule {rule:?}: judge threshold {threshold} is not between 0 and 1"
        )));
    }
    Ok(())
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

/// Compiles a rule's conditions; a malformed target glob is an error.
fn compile_when(raw: RawWhen, rule: &str) -> Result<When, PolicyError> {
    let glob = |pattern: &str| {
        Glob::new(pattern)
            .map_err(|e| PolicyError(format!("rule {rule:?}: target {pattern:?}: {e}")))
    };
    let target = match raw.target.as_deref().filter(|t| !t.is_empty()) {
        Some(pattern) => Some(glob(pattern)?),
        None => None,
    };
    let mut targets = Vec::new();
    for pattern in raw.targets.unwrap_or_default() {
        targets.push(glob(&pattern)?);
    }
    let mut arguments = Vec::new();
    for (key, matcher) in raw.arguments.unwrap_or_default() {
        let predicate = compile_predicate(matcher, rule, &key)?;
        arguments.push((key, predicate));
    }
    let agent_ids = raw.agent_ids.unwrap_or_default();
    Ok(When {
        target,
        targets: (!targets.is_empty()).then_some(targets),
        agent_id: raw.agent_id.filter(|a| !a.is_empty()),
        agent_ids: (!agent_ids.is_empty()).then_some(agent_ids),
        step_kind: raw.step_kind.filter(|k| !k.is_empty()),
        arguments,
    })
}

/// Compiles one argument's constraints, dropping empty ones; none left is an error (an
/// empty predicate would match any value).
fn compile_predicate(raw: RawMatcher, rule: &str, key: &str) -> Result<Predicate, PolicyError> {
    let text = |value: Option<serde_yaml::Value>| -> Result<Option<String>, PolicyError> {
        let text = value.as_ref().map(yaml_scalar).transpose();
        let text = text.map_err(|e| PolicyError(format!("rule {rule:?} argument {key:?}: {e}")))?;
        Ok(text.filter(|t| !t.is_empty()))
    };
    let mut one_of = Vec::new();
    for value in raw.one_of.unwrap_or_default() {
        one_of.push(text(Some(value))?.unwrap_or_default());
    }
    let regex =
        match text(raw.regex)? {
            Some(pattern) => Some(Regex::new(&pattern).map_err(|e| {
                PolicyError(format!("rule {rule:?} argument {key:?}: bad regex: {e}"))
            })?),
            None => None,
        };
    let predicate = Predicate {
        equals: text(raw.equals)?,
        contains: text(raw.contains)?,
        one_of: (!one_of.is_empty()).then_some(one_of),
        regex,
    };
    let Predicate {
        equals,
        contains,
        one_of,
        regex,
    } = &predicate;
    if equals.is_none() && contains.is_none() && one_of.is_none() && regex.is_none() {
        return Err(PolicyError(format!(
            "rule {rule:?} argument {key:?}: no non-empty equals, contains, one_of or regex, \
             so it would match any value"
        )));
    }
    Ok(predicate)
}

/// The text of a YAML scalar, as a string field reads it (`~` is empty); a list or a map is
/// an error.
fn yaml_scalar(value: &serde_yaml::Value) -> Result<String, String> {
    match value {
        serde_yaml::Value::String(s) => Ok(s.clone()),
        serde_yaml::Value::Bool(b) => Ok(b.to_string()),
        serde_yaml::Value::Number(n) => Ok(n.to_string()),
        serde_yaml::Value::Null => Ok(String::new()),
        serde_yaml::Value::Tagged(tagged) => yaml_scalar(&tagged.value),
        serde_yaml::Value::Sequence(_) | serde_yaml::Value::Mapping(_) => {
            Err("a constraint is a single value, not a list or a map".into())
        }
    }
}

impl When {
    pub(super) fn matches(&self, facts: &StepFacts<'_>) -> bool {
        if self.step_kind.as_ref().is_some_and(|k| k != facts.kind) {
            return false;
        }
        if self
            .target
            .as_ref()
            .is_some_and(|g| !g.is_match(facts.target))
        {
            return false;
        }
        if let Some(targets) = &self.targets
            && !targets.iter().any(|g| g.is_match(facts.target))
        {
            return false;
        }
        if self.agent_id.as_ref().is_some_and(|a| a != facts.agent_id) {
            return false;
        }
        if let Some(agents) = &self.agent_ids
            && !agents.iter().any(|a| a == facts.agent_id)
        {
            return false;
        }
        self.arguments.iter().all(|(key, predicate)| {
            facts
                .args
                .get(key)
                .is_some_and(|value| predicate.matches(&go_format(value)))
        })
    }
}

impl Predicate {
    /// Whether `text` meets every constraint present.
    fn matches(&self, text: &str) -> bool {
        self.equals.as_ref().is_none_or(|want| text == want)
            && self
                .contains
                .as_ref()
                .is_none_or(|part| text.contains(part.as_str()))
            && self
                .one_of
                .as_ref()
                .is_none_or(|options| options.iter().any(|o| o == text))
            && self.regex.as_ref().is_none_or(|regex| regex.is_match(text))
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
