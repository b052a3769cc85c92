//! A short, bounded run of every fuzz target with a fixed seed, so CI catches regressions.
//! The long runs are `cargo run --release -p rebuno-fuzz -- --target all --cases N`.

/// Fixed, so a failure here reproduces with `--seed 20261201 --case <index>`.
const SEED: u64 = 20_261_201;

fn run(name: &str, cases: u64) {
    let target = rebuno_fuzz::target(name).unwrap_or_else(|| panic!("no target {name}"));
    // Deep inputs recurse in several parsers: give the cases the stack the binary gives them.
    let outcome = std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(move || rebuno_fuzz::run(target, SEED, 0, cases, &|_| {}))
        .unwrap_or_else(|e| panic!("runner thread: {e}"))
        .join()
        .unwrap_or_else(|_| panic!("runner thread panicked"));
    match outcome {
        Ok(summary) => println!("{summary}"),
        Err(failure) => panic!("{failure}"),
    }
}

#[test]
fn webhook() {
    run("webhook", 3_000);
}

#[test]
fn kernel_responses() {
    run("kernel_responses", 1_500);
}

#[test]
fn sse() {
    run("sse", 3_000);
}

#[test]
fn canonical_json() {
    run("canonical_json", 3_000);
}

#[test]
fn manifest() {
    run("manifest", 2_000);
}

#[test]
fn policy() {
    run("policy", 2_000);
}

#[test]
fn every_target_is_covered() {
    let names: Vec<&str> = rebuno_fuzz::targets().iter().map(|t| t.name).collect();
    assert_eq!(
        names,
        [
            "webhook",
            "kernel_responses",
            "sse",
            "canonical_json",
            "manifest",
            "policy"
        ]
    );
}

/// Findings the harness reproduced that are not panics (a stack overflow aborts, an exponential
/// match hangs), kept as regression tests: each runs the binary's probe in a child process.
fn probe(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_rebuno-fuzz"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the probe: {e}"))
}

#[test]
fn canonical_json_survives_deep_nesting() {
    let output = probe(&["--probe-canonical-depth", "20000"]);
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn policy_globs_match_in_polynomial_time() {
    let output = probe(&["--probe-policy-glob", "40"]);
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
