//! The stand-in's fidelity, proven by E2B's own Python SDK (`e2b==2.63.0`, unchanged):
//! `official_sdk.py` runs its calls against a stand-in started in this process, then the spec
//! check (`validate.py`) reads what the SDK sent. The venv comes from `scripts/interop-venv.sh`
//! (`tests/support/venv.rs`).

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "support/venv.rs"]
mod venv;

use std::path::{Path, PathBuf};
use std::process::Output;

use rebuno_e2b_standin::{E2bStandin, StandinConfig};

const API_KEY: &str = "e2b_standin_test_key";

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("e2b-standin-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn python(args: &[&std::ffi::OsStr], env: &[(&str, &str)]) -> Output {
    let mut command = std::process::Command::new(venv::python());
    command.args(args).current_dir(std::env::temp_dir());
    for var in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        command.env_remove(var);
    }
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("E2B_")) {
        command.env_remove(key);
    }
    command
        .env("NO_PROXY", "127.0.0.1,localhost")
        .envs(env.iter().copied());
    command.output().unwrap()
}

fn report(what: &str, out: &Output) -> String {
    format!(
        "{what} exited with {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn validate(capture: &Path, flags: &[&str]) -> Output {
    let script = venv::crate_dir().join("validate.py");
    let mut args = vec![script.as_os_str(), capture.as_os_str()];
    args.extend(flags.iter().map(std::ffi::OsStr::new));
    python(&args, &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdk_runs_against_the_standin() {
    let dir = scratch("sdk");
    let capture = dir.join("capture.jsonl");
    let config = StandinConfig::new(dir.join("root"), API_KEY).capture(&capture);
    let standin = E2bStandin::start(config).unwrap();
    let url = standin.url().to_owned();
    let script = venv::crate_dir().join("tests/official_sdk.py");
    let out = tokio::task::spawn_blocking(move || {
        let env = [
            ("E2B_API_URL", url.as_str()),
            ("E2B_SANDBOX_URL", url.as_str()),
            ("E2B_API_KEY", API_KEY),
        ];
        python(&[script.as_os_str()], &env)
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", report("official_sdk.py", &out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(" passed, 0 failed"),
        "{}",
        report("official_sdk.py", &out)
    );

    // The SDK's own requests fit the published spec, but for its unpublished /v2 routes.
    let checked = validate(&capture, &["--allow-sdk-v2", "--quiet"]);
    assert!(
        checked.status.success(),
        "{}",
        report("validate.py --allow-sdk-v2", &checked)
    );
    let strict = validate(&capture, &["--quiet"]);
    let stdout = String::from_utf8_lossy(&strict.stdout);
    assert_eq!(
        strict.status.code(),
        Some(1),
        "{}",
        report("validate.py", &strict)
    );
    assert!(
        stdout.contains("UNSPECIFIED") && stdout.contains("POST /v2/sandboxes"),
        "{stdout}"
    );
    assert!(!stdout.contains("VIOLATION"), "{stdout}");

    assert_eq!(
        standin.captured().len(),
        std::fs::read_to_string(&capture).unwrap().lines().count()
    );
    standin.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_spec_check_rejects_a_hand_made_bad_capture() {
    let capture = venv::crate_dir().join("tests/data/bad_capture.jsonl");
    let out = validate(&capture, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        report("validate.py", &out)
    );
    for expected in [
        "ok          #1 POST /sandboxes",
        "VIOLATION   #2 POST /sandboxes: InvalidRequestBody",
        "'templateID' is a required property",
        "VIOLATION   #3 POST /sandboxes/iabc/connect",
        "VIOLATION   #4 GET /sandboxes/iabc: SecurityValidationError",
        "UNSPECIFIED #5 POST /v2/sandboxes",
        "UNSPECIFIED #6 POST /sandboxes/iabc/frobnicate",
        "message.bogus: no such field in filesystem.ListDirRequest",
        "message.path: 1 is not a valid string",
        "VIOLATION   #8 POST /process.Process/Start: content type 'application/json'",
        "message.process.args: expected an array",
        "more than one member of oneof selector",
        "'SIGNAL_SIGBOGUS' is not a value of process.Signal",
        "VIOLATION   #11 POST /files",
        "UNSPECIFIED #12 POST /process.Process/Frobnicate",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    let allowed = validate(&capture, &["--allow-sdk-v2"]);
    assert!(String::from_utf8_lossy(&allowed.stdout).contains("ALLOWED     #5 POST /v2/sandboxes"));
}
