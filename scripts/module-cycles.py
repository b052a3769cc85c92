#!/usr/bin/env python3
"""Finds import circles between the top-level modules of a crate's `src/` (the issue's import check).

    scripts/module-cycles.py                 # the core crate (src/)
    scripts/module-cycles.py devkernel/src   # another crate

A top-level module is `src/X.rs` or the folder `src/X/`. Module X depends on Y when code in X
names `crate::Y` (`use crate::Y::...`, `use crate::{Y, ...}`, a `crate::Y::f()` path, or a name
the crate root re-exports from Y: `crate::Error` is `error`'s). Comments,
strings and `#[cfg(test)]` items (with the files they declare) are left out: a test may reach
across. Prints each circle with one line that makes each of its edges; exit 1 if any.
"""

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("long_functions", ROOT / "scripts/long-functions.py")
_long = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_long)
strip_code = _long.strip_code

PATH = re.compile(r"\bcrate::(\{)?\s*(\w+)")
TEST_MOD = re.compile(r"^\s*mod\s+(\w+)\s*;")


def code_lines(path, test_files):
    """(number, code) of each line of `path` outside `#[cfg(test)]` items; the files of
    `#[cfg(test)] mod x;` declarations go into `test_files`."""
    state = {"block": False, "raw": None, "string": False}
    depth, skip = 0, None  # skip: [depth of the item, whether its body has opened]
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        code, state = strip_code(line, state)
        if skip is None and code.strip() == "#[cfg(test)]":
            skip = [depth, False]
            continue
        if skip is None:
            yield number, code
        elif not skip[1] and (declared := TEST_MOD.match(code)):
            folder = path.parent if path.name in ("mod.rs", "lib.rs") else path.with_suffix("")
            test_files.update({folder / f"{declared[1]}.rs", folder / declared[1]})
        for char in code:
            depth += {"{": 1, "}": -1}.get(char, 0)
            if skip is None:
                continue
            if char == "{":
                skip[1] = True
            elif depth == skip[0] and (char == "}" or (char == ";" and not skip[1])):
                skip = None


def grouped(code, start):
    """The top-level names inside `crate::{...}` starting at `start` (the brace)."""
    names, depth, word = [], 0, ""
    for char in code[start:]:
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                break
        if depth == 1 and re.match(r"\w", char):
            word += char
            continue
        if word and depth >= 1:
            names.append(word)
        word = ""
    return [n for i, n in enumerate(names) if i == 0 or n != "self"]


def reexports(src, modules):
    """{name: module} for the crate root's `pub use module::...` items (`crate::Error` is `error`)."""
    found = {}
    root = src / "lib.rs" if (src / "lib.rs").exists() else src / "main.rs"
    text = " ".join(code for _, code in code_lines(root, set()))
    for module, rest in re.findall(r"\bpub use (\w+)::([^;]*);", text):
        if module in modules:
            found.update({name: module for name in re.findall(r"\w+", rest) if name != "self"})
    return found


def edges(src):
    """{(X, Y): first `file:line` where top-level module X names `crate::Y`}."""
    modules = {p.stem for p in src.glob("*.rs")} | {p.name for p in src.iterdir() if p.is_dir()}
    modules -= {"lib", "main"}
    names = reexports(src, modules) | {m: m for m in modules}
    found, test_files = {}, set()
    for path in sorted(src.rglob("*.rs"), key=lambda p: (len(p.parts) - (p.name == "mod.rs"), p)):
        if any(t == path or t in path.parents for t in test_files):
            continue
        owner = path.relative_to(src).parts[0].removesuffix(".rs")
        lines = list(code_lines(path, test_files))
        for at, (number, code) in enumerate(lines):
            for match in PATH.finditer(code):
                rest = code + " ".join(line for _, line in lines[at + 1 : at + 40])
                targets = grouped(rest, match.start(1)) if match[1] else [match[2]]
                for target in (names.get(t) for t in targets):
                    if owner in modules and target and target != owner:
                        place = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{number}"
                        found.setdefault((owner, target), place)
    return found


def cycles(found):
    """The strongly connected components of more than one module (Tarjan)."""
    graph = {}
    for a, b in found:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def main():
    src = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT / "src"
    found = edges(src)
    circles = cycles(found)
    for component in circles:
        print("circle: " + " <-> ".join(component))
        for (a, b), place in sorted(found.items()):
            if a in component and b in component:
                print(f"  {a} -> {b}  ({place})")
    modules = len({m for edge in found for m in edge})
    print(f"{len(circles)} circle(s) among {modules} modules, {len(found)} edges", file=sys.stderr)
    return 1 if circles else 0


if __name__ == "__main__":
    sys.exit(main())
