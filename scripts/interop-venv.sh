#!/usr/bin/env bash
# Creates (idempotently) the Python venv the interop suite runs the official SDK from:
# rebuno==0.29.2 and uvicorn, pinned with their dependencies in tests/integration/interop/requirements.txt.
#
#   scripts/interop-venv.sh [DIR]     # DIR defaults to target/interop-venv in the repository
#   scripts/interop-venv.sh DIR REQUIREMENTS
#
# The second form builds another venv the same way from another pinned requirements file (the
# E2B stand-in's tools/e2b-standin/requirements.txt, into target/e2b-venv); its pins are then
# checked instead of rebuno's.
#
# Prints the venv's python path on stdout (and nothing else); progress goes to stderr.
# Uses $PYTHON (default python3, 3.11 or newer) to create the venv. Safe to run concurrently:
# callers serialize on DIR.lock, and a stamp (the requirements' hash) marks a finished venv,
# so a second run returns at once and a changed requirements file rebuilds it.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
default_requirements="$root/tests/integration/interop/requirements.txt"
requirements="${2:-$default_requirements}"
case "$requirements" in /*) ;; *) requirements="$PWD/$requirements" ;; esac
dir="${1:-$root/target/interop-venv}"
case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac
python="${PYTHON:-python3}"

die() { printf 'interop-venv: %s\n' "$*" >&2; exit 1; }

[ -f "$requirements" ] || die "missing $requirements"
stamp_want="$(sha256sum "$requirements" | cut -d' ' -f1)"
venv_python="$dir/bin/python"

ready() { [ -x "$venv_python" ] && [ "$(cat "$dir/.interop-stamp" 2>/dev/null)" = "$stamp_want" ]; }

if ready; then
    printf '%s\n' "$venv_python"
    exit 0
fi

mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
if command -v flock >/dev/null 2>&1; then
    flock 9
fi
if ready; then # another process finished it while we waited
    printf '%s\n' "$venv_python"
    exit 0
fi

command -v "$python" >/dev/null 2>&1 ||
    die "'$python' not found: the interop suite needs Python 3.11+ (set PYTHON=/path/to/python3)"
"$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' ||
    die "$("$python" --version 2>&1) is too old: rebuno 0.29.2 needs Python 3.11+ (set PYTHON=)"
"$python" -c 'import venv, ensurepip' 2>/dev/null ||
    die "'$python' lacks venv/ensurepip (on Debian: apt-get install python3-venv)"

printf 'interop-venv: creating %s\n' "$dir" >&2
rm -rf "$dir"
"$python" -m venv "$dir" >&2
"$venv_python" -m pip install --quiet --disable-pip-version-check -r "$requirements" >&2
if [ "$requirements" = "$default_requirements" ]; then
    "$venv_python" -c 'import importlib.metadata as m, rebuno, uvicorn; assert m.version("rebuno") == "0.29.2"' >&2 ||
        die "the venv at $dir does not import rebuno 0.29.2"
else
    "$venv_python" - "$requirements" >&2 <<'PY' || die "the venv at $dir does not match $requirements"
import importlib.metadata as m, sys
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if "==" in line:
        name, version = line.split("==")
        assert m.version(name) == version, f"{name} {m.version(name)} != {version}"
PY
fi
printf '%s\n' "$stamp_want" >"$dir/.interop-stamp"
printf '%s\n' "$venv_python"
