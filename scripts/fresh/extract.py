#!/usr/bin/env python3
"""Writes the README's quick-start projects to a directory, as a new user would copy them.

Every fenced block preceded by `<!-- fresh: HOST/PATH -->` becomes OUT/HOST/PATH. Registry
dependencies on this workspace's crates (`rebuno = "0.1"`) become path dependencies with the
same (default) features, and each Cargo.toml gets an empty `[workspace]` so it builds on its own.

    scripts/fresh/extract.py README.md OUT
"""

import re
import sys
from pathlib import Path

CRATES = {
    "rebuno": ".",
    "rebuno-hyper": "adapters/hyper",
    "rebuno-lambda": "adapters/lambda",
    "rebuno-workers": "adapters/workers",
    "rebuno-devkernel": "devkernel",
}
BLOCK = re.compile(r"<!-- fresh: (\S+) -->\n```[^\n]*\n(.*?)\n```", re.S)


def localize(manifest: str, root: Path) -> str:
    for crate, rel in CRATES.items():
        pattern = re.compile(rf'^{re.escape(crate)} = "[^"]*"', re.M)
        manifest = pattern.sub(f'{crate} = {{ path = "{(root / rel).resolve()}" }}', manifest)
    return manifest + "\n[workspace]\n"


def main() -> int:
    readme, out = Path(sys.argv[1]), Path(sys.argv[2])
    root = readme.resolve().parent
    blocks = BLOCK.findall(readme.read_text())
    if not blocks:
        print(f"no `<!-- fresh: ... -->` blocks in {readme}", file=sys.stderr)
        return 1
    for path, body in blocks:
        target = out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        text = body + "\n"
        if target.name == "Cargo.toml":
            text = localize(text, root)
        target.write_text(text)
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
