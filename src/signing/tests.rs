//! Every vector of PROTOCOL.md §7.1 and §7.2, plus one test per failure mode.

use super::*;

const D: &str = "01920000-0000-7000-8000-000000000001";
const E: &str = "0192f1a0-0000-7000-8000-000000000000";

/// method, target, dispatch id, attempt, body, expected signature
type Vector<'a, T> = (&'a str, T, &'a str, &'a str, &'a [u8], &'a str);

fn v1(
    method: &str,
    target: &str,
    ts: &str,
    dispatch: &str,
    attempt: &str,
    body: &[u8],
    secret: &str,
) -> String {
    RequestSignature {
        method,
        target,
        timestamp: ts,
        dispatch_id: dispatch,
        attempt,
    }
    .sign(&Secret::new(secret), body)
}

#[test]
fn official_request_vectors() {
    let ts = "1700000000";
    let cases: [Vector<'_, &str>; 4] = [
        ("GET", "/v0/executions/alpha", "", "", b"",
         "v1=d0f262ef4226bcdf886ec35a7ce4cf77286055b563078faca8b307caa8ca5839"),
        ("POST", "/prefix/v0/executions/alpha%2Fbeta/steps?x=a%20b&x=%2F", D, "3",
         "{\"text\":\"h\u{e9}llo \u{20ac} \u{1f642}\\n\"}".as_bytes(),
         "v1=08e2b66ec89c95a677798a9aa048949c38668f770f28a2beede0591e2860820b"),
        ("POST", "/v0/executions/alpha/heartbeat", D, "3", b"",
         "v1=63a3e161395bd65728afa785799ddb9e52c01f8e0a61d1d6a4089f582d334b0e"),
        ("POST", "/v0/executions/018f3a2b-4c5d-7e6f-8a9b-0c1d2e3f4a5b/steps", D, "3",
         br#"{"kind":"tool_call","target":"send_email","args":{"to":"ops@example.com"},"idempotency":"safe_to_retry"}"#,
         "v1=017dff4039ba40e90d3d8d566fdf51db427672f92d45ef41b738672238ea0058"),
    ];
    for (method, target, dispatch, attempt, body, expected) in cases {
        assert_eq!(
            v1(method, target, ts, dispatch, attempt, body, "test-secret"),
            expected,
            "{target}"
        );
    }
}

#[test]
fn python_spaced_request_vectors() {
    let ts = "1760000000";
    let step = "66521f99e59c0a40d6a02e5e7af14682c3191d9761292dfc62e169bbbd752699";
    let cases: [Vector<'_, String>; 7] = [
        ("GET", format!("/v0/executions/{E}"), "", "", b"",
         "v1=eaba3fad5bf0fa62b0f6d3701002831323916dec39892ebbe7cece06b7bbe317"),
        ("GET", format!("/v0/executions/{E}/steps?status=terminal"), "", "", b"",
         "v1=6b5de2be19070631ce704eb0d65c32f5a22d2462aab8e61f862cddbbf4a2d164"),
        ("POST", format!("/v0/executions/{E}/steps"), D, "1",
         br#"{"kind": "tool_call", "target": "search", "args": {"query": "rust"}, "idempotency": "safe_to_retry", "resources": []}"#,
         "v1=4ac0b932168c00a94bcbfd027bb9368b79034a4d15878d749b8ce6a11ad6aef7"),
        ("POST", format!("/v0/executions/{E}/steps/{step}/complete"), D, "1", br#"{"result": ["r1", "r2"]}"#,
         "v1=3c93dd2cb62ec429dce5aa684b5e0ac10616ab4cca5398bd21b2d8610a499f47"),
        ("POST", format!("/v0/executions/{E}/heartbeat"), D, "1", b"",
         "v1=32bce889a2e0ef20088aca1878bad6ed99aa2e326b8406721fea12df29e28ff3"),
        ("POST", format!("/v0/executions/{E}/complete"), D, "1", br#"{"output": {"answer": "done"}}"#,
         "v1=e3bccfdad8fc480ba0ac61e902e38804ff550bbc88722e2c75ab62761bc7d5c9"),
        ("POST", format!("/v0/executions/{E}/suspend"), D, "2", b"",
         "v1=699bf3d91986fa7700f9271023a2f4fb95aac33566e17b4d1a5a8691af24c951"),
    ];
    for (method, target, dispatch, attempt, body, expected) in cases {
        assert_eq!(
            v1(method, &target, ts, dispatch, attempt, body, "dev-secret"),
            expected,
            "{target}"
        );
    }
}

#[test]
fn webhook_vectors() {
    let secret = Secret::new("dev-secret");
    let body = |attempt: u32, lease: u32| {
        format!(
            r#"{{"execution_id":"{E}","dispatch_id":"{D}","dispatch_attempt":{attempt},"lease_timeout_seconds":{lease}}}"#
        )
    };
    assert_eq!(
        sign_webhook(&secret, body(1, 120).as_bytes()),
        "sha256=2bf2615ba841e4e4b564cfbdc923b8ceea445f7f16ddc11cec13daa5f844cfec"
    );
    assert_eq!(
        sign_webhook(&secret, body(2, 600).as_bytes()),
        "sha256=e96e3691d3290c1e8203e6f87448753b37d896fb01aa73f9d0f46a7ab90dd397"
    );
}

#[test]
fn webhook_verification_accepts_only_the_exact_signature() {
    let secret = Secret::new("dev-secret");
    let body = b"{\"execution_id\":\"e\"}";
    let good = sign_webhook(&secret, body);
    assert_eq!(verify_webhook(&secret, body, Some(good.as_bytes())), Ok(()));
    assert_eq!(
        verify_webhook(
            &secret,
            body,
            Some(good.to_uppercase().replace("SHA256=", "sha256=").as_bytes())
        ),
        Ok(())
    );
    assert_eq!(
        verify_webhook(&secret, body, None),
        Err(SignatureError::Missing)
    );
    assert_eq!(
        verify_webhook(&secret, body, Some(&good.as_bytes()[7..])),
        Err(SignatureError::Malformed)
    );
    assert_eq!(
        verify_webhook(&secret, body, Some(b"sha256=zz")),
        Err(SignatureError::Malformed)
    );
    assert_eq!(
        verify_webhook(&secret, b"{}", Some(good.as_bytes())),
        Err(SignatureError::Mismatch)
    );
    assert_eq!(
        verify_webhook(&Secret::new("other"), body, Some(good.as_bytes())),
        Err(SignatureError::Mismatch)
    );
}

#[test]
fn request_verification_binds_every_field() {
    let secret = Secret::new("test-secret");
    let base = RequestSignature {
        method: "POST",
        target: "/v0/executions/x/steps?q=a%20b",
        timestamp: "1700000000",
        dispatch_id: D,
        attempt: "3",
    };
    let header = base.sign(&secret, b"{}");
    assert_eq!(base.verify(&secret, b"{}", Some(header.as_bytes())), Ok(()));
    let variants = [
        RequestSignature {
            method: "GET",
            ..base
        },
        RequestSignature {
            target: "/v0/executions/y/steps?q=a%20b",
            ..base
        },
        RequestSignature {
            target: "/v0/executions/x/steps?q=a+b",
            ..base
        },
        RequestSignature {
            timestamp: "1700000001",
            ..base
        },
        RequestSignature {
            dispatch_id: "",
            ..base
        },
        RequestSignature {
            attempt: "4",
            ..base
        },
    ];
    for changed in variants {
        assert_eq!(
            changed.verify(&secret, b"{}", Some(header.as_bytes())),
            Err(SignatureError::Mismatch),
            "{changed:?}"
        );
    }
    assert_eq!(
        base.verify(&secret, b"{ }", Some(header.as_bytes())),
        Err(SignatureError::Mismatch)
    );
    let legacy = header.replace("v1=", "sha256=");
    assert_eq!(
        base.verify(&secret, b"{}", Some(legacy.as_bytes())),
        Err(SignatureError::Malformed)
    );
}
