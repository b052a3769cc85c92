#!/usr/bin/env python3
"""Writes the projects the docs show to a directory, as a new user would copy them.

    scripts/fresh/extract.py OUT DOC...      # e.g. OUT README.md devkernel/docs/testing.md

Every fenced block preceded by `<!-- fresh: PROJECT/PATH -->` becomes OUT/PROJECT/PATH (a block
two projects share names both: `<!-- fresh: a/PATH b/PATH -->`). A
Rust block is written as rustdoc compiles it: its hidden `# ` lines shown. Registry
dependencies on this workspace's crates (`rebuno = "0.1"`) become path dependencies with the
same (default) features, and each Cargo.toml gets an empty `[workspace]` so it builds on its own.

`<!-- fresh: PROJECT/tests/FILE.rs#NAME -->` takes a doctest as a test: the block goes into
`mod NAME` of that file (blocks marked for one file are gathered there), its
`#[tokio::main] async fn main()` becomes `#[tokio::test] async fn NAME()`, and a block without
a `main` becomes the body of `#[test] fn NAME()` (returning `Result` when it ends in `Ok::<...>`,
as rustdoc's wrapper does).
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CRATES = {
    "rebuno": ".",
    "rebuno-hyper": "adapters/hyper",
    "rebuno-lambda": "adapters/lambda",
    "rebuno-workers": "adapters/workers",
    "rebuno-devkernel": "devkernel",
}
BLOCK = re.compile(r"<!-- fresh: (\S+(?: \S+)*) -->\n```([^\n]*)\n(.*?)\n```", re.S)
TOKIO_MAIN = re.compile(r"#\[tokio::main\]\s*async fn main\(\)")


def localize(manifest: str) -> str:
    for crate, rel in CRATES.items():
        pattern = re.compile(rf'^{re.escape(crate)} = "[^"]*"', re.M)
        manifest = pattern.sub(f'{crate} = {{ path = "{(ROOT / rel).resolve()}" }}', manifest)
    return manifest + "\n[workspace]\n"


def unhide(code: str) -> str:
    """Rustdoc's hidden lines: `# x` and `#` are compiled but not shown; `##` is a `#`."""
    lines = []
    for line in code.split("\n"):
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        if stripped == "#":
            line = ""
        elif stripped.startswith("# "):
            line = indent + stripped[2:]
        elif stripped.startswith("##"):
            line = indent + stripped[1:]
        lines.append(line)
    return "\n".join(lines)


def as_test(name: str, code: str, where: str) -> str:
    """A doctest as `mod NAME` holding one test function NAME."""
    if TOKIO_MAIN.search(code):
        body = TOKIO_MAIN.sub(f"#[tokio::test]\nasync fn {name}()", code, count=1)
    elif "fn main(" in code:
        raise SystemExit(f"{where}: a `main` that is not `#[tokio::main] async fn main()`")
    else:
        last = [line for line in code.split("\n") if line.strip()][-1]
        returns = " -> Result<(), Box<dyn std::error::Error>>" if last.startswith("Ok::<") else ""
        body = f"#[test]\nfn {name}(){returns} {{\n{code}\n}}"
    return f"mod {name} {{\n{body}\n}}\n"


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    files: dict[Path, list[str]] = {}
    for doc in map(Path, sys.argv[2:]):
        blocks = BLOCK.findall(doc.read_text())
        if not blocks:
            print(f"no `<!-- fresh: ... -->` blocks in {doc}", file=sys.stderr)
            return 1
        for marks, fence, body in blocks:
            for mark in marks.split():
                add(files, out, doc, mark, fence, body)
    for target, parts in files.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(parts))
        print(f"wrote {target}")
    return 0


def add(files: dict[Path, list[str]], out: Path, doc: Path, mark: str, fence: str, body: str) -> None:
    """Adds one block to the file its mark names (a test module, or the whole file)."""
    path, _, name = mark.partition("#")
    where = f"{doc}: fresh: {mark}"
    text = unhide(body) if fence.startswith("rust") else body
    if name:
        text = as_test(name, text, where)
    elif path.endswith("Cargo.toml"):
        text = localize(text + "\n")
    parts = files.setdefault(out / path, [])
    if parts and not name:
        raise SystemExit(f"{where}: {path} is marked twice")
    parts.append(text + ("" if text.endswith("\n") else "\n"))


if __name__ == "__main__":
    sys.exit(main())
