//! `manifest`: [`rebuno_devkernel::Manifest::parse`] on mutated manifests built from samples,
//! with `${NAME}` expansion from a random environment and inline or file policies. No panic;
//! deterministic; inline policies of a parsed manifest are compiled too.
//!
//! `policy_file` makes the parser read files, so a mutated manifest is only parsed when every
//! `policy_file` it can contain names a plain file in the harness's own directory (never
//! `/dev/zero` or a path outside it).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rebuno_devkernel::{Manifest, Policy};

use super::policy::{BUNDLES, bundle_text};
use crate::Recorder;
use crate::mutate;
use crate::rng::Rng;

const SAMPLES: &[&str] = &[
    "agents:\n  - id: hello\n    webhook_url: http://127.0.0.1:5000/webhook\n    secret: ${HELLO_SECRET}\n    lease_timeout_seconds: 60\n    policy: |\n      default_action: allow\n",
    "agents:\n  - id: a\n    webhook_url: http://${HOST}/webhook\n    secret: s\n    policy_file: p.yaml\n  - id: b\n    webhook_url: u\n    secret: ${}\n",
    "agents: []\n",
    "{}\n",
    "agents:\n- {id: x, webhook_url: 'http://h/${A}${B', secret: \"\\u00e9\", lease_timeout_seconds: 18446744073709551615}\n",
    "agents:\n  - id: both\n    webhook_url: u\n    secret: s\n    policy: 'default_action: deny'\n    policy_file: q.yaml\n",
    "agents:\n  - id: dir\n    webhook_url: u\n    secret: s\n    policy_file: dir\n  - id: missing\n    webhook_url: u\n    secret: s\n    policy_file: nope.yaml\n",
];

const FRAGMENTS: &[&[u8]] = &[
    b"\n  - id: extra\n    webhook_url: u\n    secret: s\n",
    b"colour: red",
    b"lease_timeout_seconds: -1",
    b"lease_timeout_seconds: 1e3",
    b"policy: |\n      rules: [{id: a, then: {decision: allow}}]\n",
    b"${${X}}",
    b"${HOME}",
    b"policy_file: p.yaml",
    b"&a x",
    b"*a",
    b"!!map {}",
];

/// The harness's directory of policy files (created once per process).
fn base_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("rebuno-fuzz-{}", std::process::id()));
        let _ = std::fs::create_dir_all(dir.join("dir"));
        let _ = std::fs::write(dir.join("p.yaml"), BUNDLES[0]);
        let _ = std::fs::write(dir.join("q.yaml"), "rules: [{id: x}]\n");
        dir
    })
}

/// The environment: a few names resolve, to short, odd or long values.
fn env(name: &str) -> Option<String> {
    match name {
        "HELLO_SECRET" => Some("dev-secret".to_owned()),
        "HOST" => Some("127.0.0.1:5000".to_owned()),
        "A" => Some("${B}".to_owned()),
        "LONG" => Some("l".repeat(1_000)),
        "FILE" => Some("p.yaml".to_owned()),
        "" => Some("empty-name".to_owned()),
        _ => None,
    }
}

fn expand(text: &str) -> String {
    // The same rule as the manifest's: `${NAME}` → value, an unclosed `${` kept.
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find('}') {
            Some(end) => {
                out.push_str(&env(&after[..end]).unwrap_or_default());
                rest = &after[end + 1..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// Whether parsing `text` can only read files of the harness's directory.
fn files_are_safe(text: &str) -> bool {
    if !text.contains("policy_file") && !text.contains('\\') {
        return true; // no key can spell `policy_file`
    }
    let Ok(value) = serde_yaml::from_str::<serde_yaml::Value>(text) else {
        return false;
    };
    let mut safe = true;
    visit(&value, &mut |key, value| {
        if key == "policy_file" {
            let ok = value.as_str().is_some_and(|file| {
                let file = expand(file);
                !file.is_empty()
                    && file != ".."
                    && file
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
            });
            safe &= ok || value.is_null();
        }
    });
    safe
}

fn visit(value: &serde_yaml::Value, check: &mut impl FnMut(&str, &serde_yaml::Value)) {
    match value {
        serde_yaml::Value::Mapping(map) => {
            for (key, inner) in map {
                if let Some(key) = key.as_str() {
                    check(key, inner);
                } else {
                    // A non-string key could still deserialize as a field name; refuse it.
                    check("policy_file", &serde_yaml::Value::Bool(false));
                }
                visit(key, check);
                visit(inner, check);
            }
        }
        serde_yaml::Value::Sequence(items) => {
            for item in items {
                visit(item, check);
            }
        }
        serde_yaml::Value::Tagged(tagged) => visit(&tagged.value, check),
        _ => {}
    }
}

fn manifest_text(rng: &mut Rng) -> Vec<u8> {
    let mut text = rng.pick(SAMPLES).as_bytes().to_vec();
    match rng.below(8) {
        0 => text,
        1 => {
            // An inline policy from the policy generator.
            let policy = bundle_text(rng);
            let mut out =
                b"agents:\n  - id: p\n    webhook_url: u\n    secret: s\n    policy: |\n".to_vec();
            for line in policy.split(|&b| b == b'\n') {
                out.extend_from_slice(b"      ");
                out.extend_from_slice(line);
                out.push(b'\n');
            }
            out
        }
        2 => {
            let mut out = b"agents:\n".to_vec();
            for i in 0..rng.range(1, 100) {
                out.extend_from_slice(
                    format!(
                        "  - id: a{i}\n    webhook_url: http://h/${{LONG}}\n    secret: ${{S{i}}}\n"
                    )
                    .as_bytes(),
                );
            }
            out
        }
        _ => {
            let samples: Vec<&[u8]> = SAMPLES
                .iter()
                .map(|s| s.as_bytes())
                .chain(FRAGMENTS.iter().copied())
                .collect();
            mutate::mutate_bytes(rng, &mut text, &samples);
            text
        }
    }
}

pub(crate) fn case(rng: &mut Rng, recorder: &Recorder) {
    let bytes = manifest_text(rng);
    recorder.note("manifest", &bytes);
    let text = String::from_utf8_lossy(&bytes);
    if !files_are_safe(&text) {
        return;
    }
    let base = base_dir();
    let first = Manifest::parse(&text, base, env);
    let second = Manifest::parse(&text, base, env);
    match (&first, &second) {
        (Ok(a), Ok(b)) => {
            let ids: Vec<&str> = a.agents.iter().map(|s| s.id()).collect();
            let again: Vec<&str> = b.agents.iter().map(|s| s.id()).collect();
            assert_eq!(ids, again, "Manifest::parse is not deterministic");
        }
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        _ => panic!("Manifest::parse is not deterministic"),
    }
    // The same text as a policy bundle: must not panic either.
    let _ = Policy::parse(&text);
}
