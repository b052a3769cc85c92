//! docs/python-parity.md maps or explains every public name of the official Python SDK, as the
//! installed wheel (the interop venv's `rebuno==0.29.2`) lists them.

use std::collections::BTreeSet;
use std::process::Command;

use crate::support::venv::{python, repo};

/// The names `parity/names.py` prints from the installed wheel.
fn python_names() -> BTreeSet<String> {
    let script = repo().join("tests/integration/parity/names.py");
    let out = Command::new(python()).arg(&script).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} failed: {stderr}",
        script.display()
    );
    let names: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert!(names.len() > 50, "too few names from the wheel: {names:?}");
    names
}

/// The Python names in the first cell of each table row of the parity document.
fn documented_names(doc: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in doc.lines().filter(|line| line.starts_with("| `")) {
        let first = line[1..].split(" | ").next().unwrap_or_default();
        names.extend(first.split('`').skip(1).step_by(2).map(str::to_owned));
    }
    names
}

/// A row says what to write in Rust, or why there is none: its second cell is never empty,
/// and a "none" has its reason after it or in the note.
fn unexplained_rows(doc: &str) -> Vec<String> {
    doc.lines()
        .filter(|line| line.starts_with("| `"))
        .filter(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            let rust = cells.get(1).copied().unwrap_or_default();
            let note = cells.get(2).copied().unwrap_or_default();
            rust.is_empty() || (rust == "none" && note.is_empty())
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_public_name_of_the_python_sdk_is_mapped_or_explained() {
    let doc = std::fs::read_to_string(repo().join("docs/python-parity.md")).unwrap();
    let python = python_names();
    let documented = documented_names(&doc);
    let missing: Vec<_> = python.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&python).collect();
    assert!(
        missing.is_empty(),
        "docs/python-parity.md has no row for these public names of the Python SDK: \
         {missing:?}; add each with its Rust counterpart or why there is none"
    );
    assert!(
        stale.is_empty(),
        "docs/python-parity.md lists names the installed Python SDK does not have: {stale:?}"
    );
    let unexplained = unexplained_rows(&doc);
    assert!(
        unexplained.is_empty(),
        "rows without a counterpart or a reason: {unexplained:#?}"
    );
}

#[test]
fn a_row_without_a_counterpart_or_a_reason_is_caught() {
    let doc = "| `a` | `b()` | |\n| `c` | none | |\n| `d` | none: dropped | |\n| `e` |  | x |\n";
    let caught = unexplained_rows(doc);
    assert_eq!(caught.len(), 2, "{caught:?}");
    assert!(caught[0].starts_with("| `c`") && caught[1].starts_with("| `e`"));
    assert_eq!(
        documented_names("| `x`, `y.z` | `w` | |"),
        BTreeSet::from(["x".to_owned(), "y.z".to_owned()])
    );
}
