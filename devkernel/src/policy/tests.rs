use serde_json::json;

use super::*;

fn facts<'a>(kind: &'a str, target: &'a str, args: &'a Value) -> StepFacts<'a> {
    StepFacts {
        agent_id: "hello",
        kind,
        target,
        args,
    }
}

const BUNDLE: &str = r#"
default_action: deny
rules:
  - id: allow-search
    when: { step_kind: tool_call, target: "search*" }
    then: { decision: allow }
  - id: block-big
    when:
      targets: [transfer, wire_*]
      arguments: { amount: { regex: "^[0-9]{4,}$" } }
    then: { decision: deny, reason: too_big }
  - id: gate-transfer
    when: { target: transfer, arguments: { currency: { one_of: [EUR, USD] } } }
    then:
      decision: require_approval
      approval_config: { approvers: [alice], timeout: 5m, message: check it }
  - id: llm
    when: { step_kind: llm_call, agent_ids: [hello] }
    then: { decision: allow }
"#;

#[test]
fn first_match_in_file_order() {
    let policy = Policy::parse(BUNDLE).unwrap();
    let none = Value::Null;
    let v = policy.evaluate(&facts("tool_call", "search_web", &none));
    assert_eq!(
        (v.action, v.rule_id.as_str()),
        (Action::Allow, "allow-search")
    );
    assert!(v.policy_hash.is_some());

    let big = json!({"amount": 12000, "currency": "EUR"});
    let v = policy.evaluate(&facts("tool_call", "transfer", &big));
    assert_eq!(v.action, Action::Deny);
    assert_eq!(v.rule_id, "block-big");
    assert_eq!(v.reason.as_deref(), Some("too_big"));

    let small = json!({"amount": 12, "currency": "EUR"});
    let v = policy.evaluate(&facts("tool_call", "transfer", &small));
    assert_eq!(v.rule_id, "gate-transfer");
    let Action::RequireApproval(config) = v.action else {
        panic!("expected approval")
    };
    assert_eq!(config.approvers, Some(vec!["alice".to_owned()]));
    assert_eq!(config.timeout, Some(Duration::from_secs(300)));
    assert_eq!(config.message.as_deref(), Some("check it"));
}

#[test]
fn fallthrough_rules() {
    let policy = Policy::parse(BUNDLE).unwrap();
    let none = Value::Null;
    let v = policy.evaluate(&facts("local", "roll_dice", &none));
    assert_eq!((v.action, v.rule_id.as_str()), (Action::Allow, "local"));
    let v = policy.evaluate(&facts("tool_call", "rm", &none));
    assert_eq!((v.action, v.rule_id.as_str()), (Action::Deny, "default"));
    assert_eq!(v.reason.as_deref(), Some("no explicit allow rule matched"));
    let allow = Policy::parse("default_action: allow").unwrap();
    let v = allow.evaluate(&facts("tool_call", "rm", &none));
    assert_eq!((v.action, v.rule_id.as_str()), (Action::Allow, "default"));
}

#[test]
fn argument_matchers_compare_strings() {
    let policy = Policy::parse(
        "rules:\n  - id: eq\n    when: { arguments: { n: { equals: 5 }, s: { contains: ell } } }\n    then: { decision: allow }\n",
    )
    .unwrap();
    let yes = json!({"n": 5, "s": "hello"});
    let no = json!({"n": 6, "s": "hello"});
    assert_eq!(
        policy.evaluate(&facts("tool_call", "x", &yes)).rule_id,
        "eq"
    );
    assert_eq!(
        policy.evaluate(&facts("tool_call", "x", &no)).rule_id,
        "default"
    );
}

#[test]
fn rejects_bad_bundles() {
    for bad in [
        "rules: [{then: {decision: allow}}]",
        "rules: [{id: a, then: {decision: maybe}}]",
        "rules: [{id: a, then: {decision: allow}}, {id: a, then: {decision: deny}}]",
        "unknown_key: 1",
        "rules: [{id: a, when: {colour: red}, then: {decision: allow}}]",
        "rules: [{id: a, when: {arguments: {x: {regex: '('}}}, then: {decision: allow}}]",
        "rules: [{id: a, then: {decision: require_approval, approval_config: {timeout: soon}}}]",
        "rules: [{id: a, then: {decision: allow, rate_limit: {max_calls: 0, window: 1m}}}]",
        "rules: [{id: a, then: {decision: allow, rate_limit: {max_calls: 1, window: 1m, per_what: planet}}}]",
        "rules: [{id: a, then: {decision: allow, budget: {max_tokens: 5, on_exceed: shrug}}}]",
    ] {
        assert!(Policy::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn every_constraint_of_an_argument_predicate_is_checked() {
    let policy = Policy::parse(
        "rules:\n  - id: a\n    when: { arguments: { c: { contains: rm, regex: '^sudo ', equals: '', one_of: [] } } }\n    then: { decision: deny }\n",
    )
    .unwrap();
    let rule = |command: &str| {
        let args = json!({ "c": command });
        policy.evaluate(&facts("tool_call", "sh", &args)).rule_id
    };
    assert_eq!(rule("sudo rm -rf /"), "a");
    assert_eq!(rule("rm -rf /"), "default");
    assert_eq!(rule("sudo ls"), "default");
}

#[test]
fn empty_argument_predicates_are_refused() {
    for bad in [
        "rules: [{id: a, when: {arguments: {c: {}}}, then: {decision: allow}}]",
        "rules: [{id: a, when: {arguments: {c: {equals: ''}}}, then: {decision: allow}}]",
        "rules: [{id: a, when: {arguments: {c: {equals: ~, regex: '', one_of: []}}}, then: {decision: allow}}]",
        "rules: [{id: a, when: {arguments: {c: {equals: [1, 2]}}}, then: {decision: allow}}]",
    ] {
        assert!(Policy::parse(bad).is_err(), "{bad}");
    }
    assert!(
        Policy::parse(
            "rules: [{id: a, when: {arguments: {c: {one_of: ['']}}}, then: {decision: allow}}]"
        )
        .is_ok()
    );
}

#[test]
fn target_and_targets_must_both_match() {
    let policy = Policy::parse(
        "rules:\n  - id: a\n    when: { target: 'fs_*', targets: ['*_read', '*_list'], agent_id: hello, agent_ids: [hello, other] }\n    then: { decision: allow }\n",
    )
    .unwrap();
    let none = Value::Null;
    let rule = |target: &str| policy.evaluate(&facts("tool_call", target, &none)).rule_id;
    assert_eq!(rule("fs_read"), "a");
    assert_eq!(rule("fs_write"), "default");
    assert_eq!(rule("db_read"), "default");
}

#[test]
fn a_judge_rule_denies_without_a_judge() {
    let policy = Policy::parse(
        "rules:\n  - id: j\n    then: { decision: judge, reason: mine, judge: { threshold: 0.9, fallback: allow, instructions: be careful } }\n",
    )
    .unwrap();
    let none = Value::Null;
    let v = policy.evaluate(&facts("tool_call", "bash", &none));
    assert_eq!(
        (v.action, v.rule_id.as_str(), v.reason.as_deref()),
        (Action::Deny, "j", Some("judge not configured"))
    );
    for bad in [
        "rules: [{id: a, then: {decision: deny, judge: {instructions: x}}}]",
        "rules: [{id: a, then: {decision: judge, judge: {fallback: maybe}}}]",
        "rules: [{id: a, then: {decision: judge, judge: {threshold: -0.1}}}]",
        "rules: [{id: a, then: {decision: judge, judge: {model: big}}}]",
    ] {
        assert!(Policy::parse(bad).is_err(), "{bad}");
    }
    assert!(
        Policy::parse("rules: [{id: a, then: {decision: allow, judge: {threshold: 0}}}]").is_ok()
    );
}
