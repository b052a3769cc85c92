#!/usr/bin/env python3
"""Lists the functions of the workspace's crates longer than a limit (60 lines by default).

    scripts/long-functions.py            # every function over 60 lines, longest first; exit 1 if any
    scripts/long-functions.py --max 80   # another limit
    scripts/long-functions.py --top 10   # the ten longest, whatever their length (exit 0)

Crate code: the `src/` folders of every crate (the core, adapters/*, devkernel, examples/*, and
the tools/* that CI runs: bench, campaign, fuzz, the E2B stand-in), without the `#[cfg(test)]`
module that ends a file; test files (`tests/`) are not counted. A function's length counts its
lines from `fn` to its closing brace, doc comments and attributes left out. The scanner knows
Rust's strings, raw strings, chars and comments well enough for this code; it is not a parser.
"""

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIRS = ["src", "adapters/*/src", "devkernel/src", "examples/*/src", "tools/*/src"]
FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?((const|async|unsafe|extern \"C\")\s+)*fn\s+(\w+)")


def strip_code(line, state):
    """`line` with strings, chars and comments blanked, and the state (in a block comment or a
    raw string with N hashes) carried to the next line."""
    out = []
    i = 0
    while i < len(line):
        if state["block"]:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out), state
            state["block"] = False
            i = end + 2
            continue
        if state["raw"] is not None:
            end = line.find('"' + "#" * state["raw"], i)
            if end < 0:
                return "".join(out), state
            i = end + 1 + state["raw"]
            state["raw"] = None
            continue
        if state["string"]:
            if line[i] == "\\":
                i += 2
                continue
            if line[i] == '"':
                state["string"] = False
            i += 1
            continue
        rest = line[i:]
        if rest.startswith("//"):
            break
        if rest.startswith("/*"):
            state["block"] = True
            i += 2
            continue
        raw = re.match(r'b?r(#*)"', rest)
        if raw:
            state["raw"] = len(raw.group(1))
            i += raw.end()
            continue
        if rest.startswith('"') or rest.startswith('b"'):
            state["string"] = True
            i += 2 if rest.startswith('b"') else 1
            continue
        char = re.match(r"b?'(\\.|\\u\{[0-9a-fA-F]+\}|[^\\'])'", rest)
        if char:
            i += char.end()
            continue
        out.append(line[i])
        i += 1
    return "".join(out), state


def functions(path):
    """(name, first line, length) of each function of `path` outside its trailing test module."""
    lines = path.read_text(encoding="utf-8").splitlines()
    state = {"block": False, "raw": None, "string": False}
    found, open_fns, depth, nest = [], [], 0, 0
    for number, line in enumerate(lines, 1):
        if line.strip() == "#[cfg(test)]" and depth == 0:
            break
        code, state = strip_code(line, state)
        match = FN.match(code)
        if match and not state["block"]:
            open_fns.append([match.group(5), number, depth, False, nest])
        for char in code:
            if char in "([":
                nest += 1
            elif char in ")]":
                nest -= 1
            elif char == "{":
                depth += 1
                if open_fns and not open_fns[-1][3] and depth == open_fns[-1][2] + 1:
                    open_fns[-1][3] = True
            elif char == "}":
                depth -= 1
                if open_fns and open_fns[-1][3] and depth == open_fns[-1][2]:
                    name, start = open_fns.pop()[:2]
                    found.append((name, start, number - start + 1))
            elif char == ";" and open_fns and not open_fns[-1][3] and nest == open_fns[-1][4]:
                open_fns.pop()  # a declaration without a body (a trait's); not `[T; N]`
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=60)
    parser.add_argument("--top", type=int)
    args = parser.parse_args()
    rows = []
    for pattern in SOURCE_DIRS:
        for folder in sorted(ROOT.glob(pattern)):
            for path in sorted(folder.rglob("*.rs")):
                for name, start, length in functions(path):
                    rows.append((length, f"{path.relative_to(ROOT)}:{start}", name))
    rows.sort(reverse=True)
    if args.top:
        for length, place, name in rows[: args.top]:
            print(f"{length:4d}  {place}  {name}")
        return 0
    long = [row for row in rows if row[0] > args.max]
    for length, place, name in long:
        print(f"{length:4d}  {place}  {name}")
    print(f"{len(long)} function(s) over {args.max} lines in {len(rows)}", file=sys.stderr)
    return 1 if long else 0


if __name__ == "__main__":
    sys.exit(main())
