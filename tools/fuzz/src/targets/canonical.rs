//! `canonical_json`: the dev kernel's step identity (`canonical_json`, `args_hash`, `step_id`)
//! and the SDK's signatures (`rebuno::signing`).
//!
//! * `canonical_json` never panics, is deterministic, is a fixed point on its own output, and
//!   agrees with `serde_json`: every document `serde_json` accepts canonicalizes, to a text
//!   `serde_json` reads back as the same value; `args_hash` is the SHA-256 of the text.
//! * `step_id` is deterministic and its length prefixes keep fields apart.
//! * Webhook signatures verify exactly when the header is `sha256=` plus the right MAC in hex
//!   of either case; request signatures verify for the fields they were made over and fail
//!   when any newline-free field changes.

use rebuno::Secret;
use rebuno::signing::{self, RequestSignature};
use rebuno_devkernel::identity::{args_hash, canonical_json, step_id};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::unhex;
use crate::Recorder;
use crate::mutate;
use crate::rng::Rng;

const SAMPLES: &[&[u8]] = &[
    br#"{"b": 2, "a": 1.50}"#,
    br#"{"html": "<a>&</a>", "u": "\u2028\u2029\ud83d\ude00\u00e9", "e": "\"\\\/\b\f\n\r\t"}"#,
    br#"{"nested": {"z": [1, 2, 3], "a": true}, "n": -1.5e-7, "big": 1000000000000000000000000000000}"#,
    br#"[null, false, true, 0, -0, 1E+2, "", {}, []]"#,
    br#"{"a": 1, "a": 2, "\u0061": 3}"#,
    br#"{"lone": "\ud800", "pair": "\ud800\udc00", "low": "\udc00x"}"#,
    b"{\"ctl\": \"line1\\nline2\\ttab\", \"raw\": \"caf\xc3\xa9 \xe6\x97\xa5\"}",
    b"  \t\r\n ",
];

/// A document to canonicalize.
fn input(rng: &mut Rng) -> Vec<u8> {
    match rng.below(10) {
        0..=2 => {
            let value = mutate::value(rng, 5);
            mutate::render(rng, &value)
        }
        3..=5 => {
            let mut bytes = rng.pick(SAMPLES).to_vec();
            mutate::mutate_bytes(rng, &mut bytes, SAMPLES);
            bytes
        }
        6 => {
            let depth = rng.range(1, mutate::MAX_DEPTH);
            let (open, close): (&[u8], &[u8]) = if rng.coin() {
                (b"[", b"]")
            } else {
                (b"{\"k\":", b"}")
            };
            let mut bytes = open.repeat(depth);
            bytes.extend_from_slice(b"1");
            if !rng.one_in(4) {
                bytes.extend_from_slice(&close.repeat(depth));
            }
            bytes
        }
        7 => {
            let value = mutate::value(rng, 3);
            let mut value = value;
            mutate::mutate_json(rng, &mut value);
            mutate::render(rng, &value)
        }
        8 => mutate::garbage(rng),
        _ => rng.pick(SAMPLES).to_vec(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn check_canonical(raw: &[u8]) {
    let first = canonical_json(raw);
    let second = canonical_json(raw);
    assert_eq!(first, second, "canonical_json is not deterministic");
    let hash = args_hash(raw);
    match (&first, &hash) {
        (Ok(text), Ok(hash)) => {
            assert_eq!(*hash, hex(&Sha256::digest(text.as_bytes())), "args_hash");
            let again = canonical_json(text.as_bytes());
            assert_eq!(
                again.as_ref(),
                Ok(text),
                "canonical_json is not a fixed point"
            );
        }
        (Err(a), Err(b)) => assert_eq!(a, b, "args_hash fails differently"),
        _ => panic!("canonical_json and args_hash disagree: {first:?} / {hash:?}"),
    }
    // serde_json as the reference reader (its own 128-level recursion limit applies).
    if let Ok(reference) = serde_json::from_slice::<Value>(raw) {
        let text = match &first {
            Ok(text) => text,
            Err(error) => panic!("serde_json accepts what canonical_json refuses ({error})"),
        };
        match serde_json::from_str::<Value>(text) {
            Ok(back) => assert_eq!(back, reference, "the canonical text means something else"),
            Err(error) => panic!("serde_json cannot read the canonical text back: {error}"),
        }
    }
}

fn check_step_id(rng: &mut Rng) {
    let fields: Vec<String> = (0..4).map(|_| mutate::ident(rng)).collect();
    let occurrence = if rng.coin() {
        u32::MAX
    } else {
        rng.below(5) as u32
    };
    let id = step_id(&fields[0], &fields[1], &fields[2], &fields[3], occurrence);
    assert_eq!(
        id,
        step_id(&fields[0], &fields[1], &fields[2], &fields[3], occurrence),
        "step_id is not deterministic"
    );
    assert!(id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()));
    // Moving one character across a field boundary must change the id.
    let at = rng.below(3);
    if let Some(ch) = fields[at].chars().last() {
        let mut moved = fields.clone();
        moved[at].pop();
        moved[at + 1].insert(0, ch);
        let other = step_id(&moved[0], &moved[1], &moved[2], &moved[3], occurrence);
        assert_ne!(
            id, other,
            "step_id fields run together: {fields:?} / {moved:?}"
        );
    }
}

/// Whether `header` is `sha256=` + the right MAC, in hex of either case.
fn webhook_ok(secret: &Secret, body: &[u8], header: &[u8]) -> bool {
    let good = signing::sign_webhook(secret, body);
    header.strip_prefix(b"sha256=").is_some_and(|digits| {
        digits.len() == 64
            && unhex(digits).is_some()
            && unhex(digits) == unhex(&good.as_bytes()[7..])
    })
}

/// Webhook and request signatures under a random secret, over `body`.
fn check_signatures(rng: &mut Rng, body: &[u8], recorder: &Recorder) {
    let secret = Secret::new(mutate::string(rng));
    let header = check_webhook_signature(rng, &secret, body, recorder);
    check_request_signature(rng, &secret, body, &header);
}

/// `sign_webhook` is deterministic and well-formed, its header verifies, a missing one does
/// not, and `verify_webhook` agrees with [`webhook_ok`] on a mutated header. Returns the header.
fn check_webhook_signature(
    rng: &mut Rng,
    secret: &Secret,
    body: &[u8],
    recorder: &Recorder,
) -> String {
    let header = signing::sign_webhook(secret, body);
    assert_eq!(header, signing::sign_webhook(secret, body), "sign_webhook");
    assert!(
        header.starts_with("sha256=") && header.len() == 71,
        "{header}"
    );
    assert!(signing::verify_webhook(secret, body, Some(header.as_bytes())).is_ok());
    assert!(signing::verify_webhook(secret, body, None).is_err());
    let mut mutated = header.clone().into_bytes();
    mutate::mutate_bytes(rng, &mut mutated, &[]);
    recorder.note("mutated webhook signature", &mutated);
    assert_eq!(
        signing::verify_webhook(secret, body, Some(&mutated)).is_ok(),
        webhook_ok(secret, body, &mutated),
        "verify_webhook disagrees with the model"
    );
    header
}

/// A request signature over random fields round-trips, is deterministic, refuses a `V1=`
/// prefix and the webhook header `webhook_header`, and stops verifying when a field changes.
fn check_request_signature(rng: &mut Rng, secret: &Secret, body: &[u8], webhook_header: &str) {
    let fields: Vec<String> = (0..5).map(|_| mutate::string(rng)).collect();
    let signature = RequestSignature {
        method: &fields[0],
        target: &fields[1],
        timestamp: &fields[2],
        dispatch_id: &fields[3],
        attempt: &fields[4],
    };
    let signed = signature.sign(secret, body);
    assert!(signed.starts_with("v1=") && signed.len() == 67, "{signed}");
    assert_eq!(
        signed,
        signature.sign(secret, body),
        "RequestSignature::sign"
    );
    assert!(
        signature
            .verify(secret, body, Some(signed.as_bytes()))
            .is_ok()
    );
    assert!(
        signature
            .verify(secret, body, Some(signed.to_ascii_uppercase().as_bytes()))
            .is_err(),
        "an uppercase V1= prefix must not verify"
    );
    assert!(
        signature
            .verify(secret, body, Some(webhook_header.as_bytes()))
            .is_err()
    );
    check_changed_field(rng, secret, body, &fields, &signed);
}

/// `signed`, made over `fields` and `body`, must not verify once one of them (chosen at
/// random) changes; checked only when no field holds a newline, since the signed fields are
/// joined by newlines.
fn check_changed_field(
    rng: &mut Rng,
    secret: &Secret,
    body: &[u8],
    fields: &[String],
    signed: &str,
) {
    let changed = rng.below(6);
    let mut other = fields.to_vec();
    let mut other_body = body.to_vec();
    if changed == 5 {
        other_body.push(b'!');
    } else {
        other[changed].push('x');
    }
    let newline_free = fields.iter().all(|f| !f.contains('\n'));
    let moved = RequestSignature {
        method: &other[0],
        target: &other[1],
        timestamp: &other[2],
        dispatch_id: &other[3],
        attempt: &other[4],
    };
    if newline_free {
        assert!(
            moved
                .verify(secret, &other_body, Some(signed.as_bytes()))
                .is_err(),
            "a changed field {changed} still verifies"
        );
    }
}

pub(crate) fn case(rng: &mut Rng, recorder: &Recorder) {
    let raw = input(rng);
    recorder.note("document", &raw);
    check_canonical(&raw);
    check_step_id(rng);
    check_signatures(rng, &raw, recorder);
}
