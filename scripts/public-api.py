#!/usr/bin/env python3
"""A plain-text snapshot of each published crate's public API, read from rustdoc's HTML.

One line per public item (`struct rebuno::Agent`) and per member rustdoc lists for it: inherent
and trait-impl methods, fields, variants, associated items, and the trait impls themselves
(auto traits included, so losing `Send` shows). Blanket impls (`impl<T> From<T> for T`, ...)
are left out: they belong to other crates. Stable Rust only; no nightly rustdoc JSON.

    scripts/public-api.py write    # after `cargo doc` (see .ci/run), updates api/*.txt
    scripts/public-api.py check    # fails, with a diff, when the surface changed

CI runs `check`: a change to the public API must come with its updated snapshot.
"""

import difflib
import html
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# crate -> rustdoc output dir (rebuno-workers exists only for wasm32).
CRATES = {
    "rebuno": ROOT / "target/doc/rebuno",
    "rebuno_hyper": ROOT / "target/doc/rebuno_hyper",
    "rebuno_lambda": ROOT / "target/doc/rebuno_lambda",
    "rebuno_devkernel": ROOT / "target/doc/rebuno_devkernel",
    "rebuno_workers": ROOT / "target/wasm32-unknown-unknown/doc/rebuno_workers",
}
PAGE = re.compile(r"^(struct|enum|trait|fn|macro|constant|static|type|union|attr|derive|traitalias)\.(.+)\.html$")
REEXPORT = re.compile(r'id="reexport\.([^"]+)"')
MEMBER = re.compile(r'id="((?:method|tymethod|structfield|variant|associatedtype|associatedconstant|impl)[.-][^"]+)"')


def page_lines(crate: str, path: Path, docs: Path) -> list[str]:
    text = path.read_text(errors="replace")
    if 'http-equiv="refresh"' in text:  # a redirect from a private module's path
        return []
    kind, name = PAGE.match(path.name).groups()
    module = "::".join((crate, *path.relative_to(docs).parent.parts))
    item = f"{kind} {module}::{name}"
    cut = text.find('id="blanket-implementations"')
    members = [m for m in MEMBER.findall(text if cut < 0 else text[:cut]) if kept(m, name)]
    return [item] + [f"{item}: {html.unescape(m)}" for m in dict.fromkeys(members)]


# Auto traits other than Send and Sync vary with the toolchain (UnsafeUnpin is new); the ids of
# inherent impl blocks (`impl-Agent-2`) count how the code is split, not what it offers.
NOISE = re.compile(r"^impl-(Freeze|RefUnwindSafe|UnwindSafe|Unpin|UnsafeUnpin)-for-")


def kept(member: str, name: str) -> bool:
    if NOISE.match(member):
        return False
    return not re.fullmatch(rf"impl-{re.escape(name)}(%3C.*%3E)?(-\d+)?", member)


def snapshot(crate: str, docs: Path) -> str:
    if not docs.is_dir():
        sys.exit(f"{docs} is missing: run the `cargo doc` steps of .ci/run first")
    lines = [f"mod {crate}"]
    for path in sorted(docs.rglob("*.html")):
        if PAGE.match(path.name):
            lines += page_lines(crate, path, docs)
        elif path.name == "index.html":
            text = path.read_text(errors="replace")
            if 'http-equiv="refresh"' in text:
                continue
            module = "::".join((crate, *path.relative_to(docs).parent.parts))
            lines.append(f"mod {module}")
            # `pub use` of items public elsewhere get no page of their own, only this entry.
            lines += [f"reexport {module}::{name}" for name in REEXPORT.findall(text)]
    return "\n".join(sorted(set(lines))) + "\n"


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "check"
    changed = False
    for crate, docs in CRATES.items():
        target = ROOT / "api" / f"{crate}.txt"
        now = snapshot(crate, docs)
        if mode == "write":
            target.write_text(now)
            print(f"wrote {target.relative_to(ROOT)} ({now.count(chr(10))} lines)")
            continue
        before = target.read_text() if target.exists() else ""
        if before != now:
            changed = True
            sys.stdout.writelines(
                difflib.unified_diff(before.splitlines(True), now.splitlines(True), f"api/{crate}.txt", "now")
            )
    if changed:
        print("\nThe public API changed. If that is intended: scripts/public-api.py write, and commit api/.")
        return 1
    if mode != "write":
        print("public API unchanged:", ", ".join(CRATES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
