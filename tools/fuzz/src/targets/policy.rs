//! `policy`: [`rebuno_devkernel::Policy::parse`] on YAML bundles built from samples and
//! mutated. No panic; parsing is deterministic; a parsed policy keeps its source text.
//!
//! Evaluation is `pub(crate)` in the dev kernel (reachable only through a running kernel's
//! HTTP routes), so it is not exercised here.

use rebuno_devkernel::Policy;

use crate::Recorder;
use crate::mutate;
use crate::rng::Rng;

pub(crate) const BUNDLES: &[&str] = &[
    r#"
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
"#,
    "default_action: allow\n",
    "",
    r#"
rules:
  - id: limited
    priority: 10
    when: { target: "fs.?ead", agent_id: a }
    then:
      decision: allow
      rate_limit: { max_calls: 3, window: 1m30s, per_what: session, max_wait: 250ms, on_limiter_error: deny }
  - id: budget
    when: { step_kind: llm_call }
    then:
      decision: allow
      budget: { max_tokens: 18446744073709551615, on_exceed: require_approval, scope: session }
  - id: judged
    when: { arguments: { n: { equals: 5 }, s: { contains: ell }, z: { equals: null } } }
    then: { decision: judge }
"#,
    "rules:\n- id: x\n  when: {target: '[a-c]x', arguments: {q: {regex: '(?i)drop\\s+table'}}}\n  then: {decision: deny, reason: ''}\n",
    "default_action: allow\nrules: []\n",
    "rules: [{id: a, then: {decision: allow}}, {id: b, when: {targets: ['*', '\\*']}, then: {decision: require_approval, approval_config: {timeout: 1.5h, approvers: []}}}]\n",
];

/// Fragments spliced into bundles: keys, values and structure the schema knows.
const FRAGMENTS: &[&[u8]] = &[
    b"\n  - id: r\n    then: { decision: allow }\n",
    b"rate_limit: { max_calls: 0, window: 0s }",
    b"window: 9999999999999999999h",
    b"max_wait: -1s",
    b"timeout: 1e400s",
    b"regex: \"(((((a*)*)*)*)*\"",
    b"regex: \"[\"",
    b"regex: \"\\\\p{Greek}{1000}{1000}\"",
    b"decision: maybe",
    b"per_what: planet",
    b"scope: galaxy",
    b"on_exceed: explode",
    b"equals: [1, {a: b}]",
    b"one_of: [~, true, 1.5, !!binary aGk=]",
    b"priority: 99999999999999999999",
    b"&anchor { decision: allow }",
    b"*anchor",
    b"? complex\n: key",
    b"\xc3\x28",
    b"max_tokens: -5",
    b"duration: 1h30m250ms",
    b"timeout: 1.5.5h",
    b"timeout: 5\xc2\xb5s",
];

pub(crate) fn bundle_text(rng: &mut Rng) -> Vec<u8> {
    let mut text = rng.pick(BUNDLES).as_bytes().to_vec();
    match rng.below(10) {
        0 | 1 => text,
        2 => {
            // Many rules: duplicates, long ids, long regexes.
            let mut out = b"rules:\n".to_vec();
            for i in 0..rng.range(1, 200) {
                let id = if rng.one_in(20) { 0 } else { i };
                out.extend_from_slice(
                    format!("  - id: r{id}\n    when: {{ target: \"t{i}*\" }}\n    then: {{ decision: allow }}\n")
                        .as_bytes(),
                );
            }
            out
        }
        3 => {
            // Deep flow nesting inside a matcher value.
            let depth = rng.range(1, mutate::MAX_DEPTH);
            let mut out = b"rules:\n  - id: deep\n    when: { arguments: { a: { equals: ".to_vec();
            out.extend(std::iter::repeat_n(b'[', depth));
            out.extend(std::iter::repeat_n(b']', depth));
            out.extend_from_slice(b" } } }\n    then: { decision: allow }\n");
            out
        }
        4 if rng.one_in(50) => {
            let n = rng.range(1 << 16, mutate::MAX_LONG);
            format!(
                "rules:\n  - id: {}\n    then: {{ decision: allow }}\n",
                "x".repeat(n)
            )
            .into_bytes()
        }
        _ => {
            let samples: Vec<&[u8]> = BUNDLES
                .iter()
                .map(|b| b.as_bytes())
                .chain(FRAGMENTS.iter().copied())
                .collect();
            mutate::mutate_bytes(rng, &mut text, &samples);
            text
        }
    }
}

pub(crate) fn case(rng: &mut Rng, recorder: &Recorder) {
    let bytes = bundle_text(rng);
    recorder.note("bundle", &bytes);
    // The API takes &str: invalid UTF-8 is decoded lossily, as a file reader would refuse it.
    let text = String::from_utf8_lossy(&bytes);
    let first = Policy::parse(&text);
    let second = Policy::parse(&text);
    match (&first, &second) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a.yaml(), text, "the policy lost its source");
            assert_eq!(a.yaml(), b.yaml());
        }
        (Err(a), Err(b)) => assert_eq!(a, b, "Policy::parse fails differently twice"),
        _ => panic!("Policy::parse is not deterministic"),
    }
}
