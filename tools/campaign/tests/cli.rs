//! The campaign's command line. Besides checking it, this test makes `cargo test --workspace`
//! build the campaign's binaries with the workspace's test features, so CI runs them without
//! a second build of their dependencies.

use std::process::{Command, Output};

fn campaign(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_campaign"))
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("could not run the campaign: {error}"))
}

#[test]
fn help_lists_the_scenarios_and_exits_0() {
    let output = campaign(&["--help"]);
    assert!(output.status.success());
    let usage = String::from_utf8_lossy(&output.stdout);
    for scenario in [
        "kernel-restart",
        "repeat-after-deadline",
        "stale-dispatch-then-repeat",
    ] {
        assert!(usage.contains(scenario), "{usage}");
    }
}

#[test]
fn an_unknown_flag_or_a_duration_without_soak_is_refused_before_anything_starts() {
    for (args, message) in [
        (&["--sed", "1"][..], "unknown flag --sed"),
        (&["--duration", "1h"][..], "--duration needs --soak"),
        (&["--seed"][..], "--seed needs a value"),
    ] {
        let output = campaign(args);
        assert!(!output.status.success(), "{args:?} was accepted");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
    for bin in [
        env!("CARGO_BIN_EXE_campaign-kernel"),
        env!("CARGO_BIN_EXE_campaign-agent"),
    ] {
        assert!(std::path::Path::new(bin).is_file(), "{bin}");
    }
}
