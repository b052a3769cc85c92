//! The differential runner: a scenario's drive runs on a Python side and a Rust side at once,
//! then their normalised logs must be equal (after the scenario's justified rewrites).

use crate::engine::{Justified, assert_same, capture, justify};
use crate::world::{Group, Lang, Side};

/// Runs `drive` on both sides and compares the logs of the executions it returns (in that
/// order: the first is `<exec:1>` on both sides).
pub async fn differential(
    scenario: &str,
    group: &'static Group,
    justified: &[Justified],
    drive: impl AsyncFn(&mut Side) -> Vec<String>,
) {
    let (mut python, mut rust) = tokio::join!(
        Side::start(Lang::Python, group, scenario),
        Side::start(Lang::Rust, group, scenario),
    );
    let (python_ids, rust_ids) = tokio::join!(drive(&mut python), drive(&mut rust));
    for (side, ids) in [(&mut python, &python_ids), (&mut rust, &rust_ids)] {
        for id in ids {
            side.watch(id);
        }
    }
    let mut python_lines = capture(&python, &python_ids).await;
    let rust_lines = capture(&rust, &rust_ids).await;
    justify(&mut python_lines, justified);
    if std::env::var_os("REBUNO_DIFF_VERBOSE").is_some() {
        eprintln!("scenario {scenario}, rust side:\n{}", rust_lines.join("\n"));
    }
    assert_same(scenario, &python_lines, &rust_lines);
}

/// A drive that runs one execution with `input` to its end.
pub async fn one(side: &mut Side, input: serde_json::Value) -> Vec<String> {
    vec![side.run(input).await]
}
