#!/usr/bin/env bash
# Installs (idempotently) the pinned MCP servers tests/integration/mcp.rs and examples/mcp_files.rs run:
#   * npm: @modelcontextprotocol/server-everything and server-filesystem 2026.8.31, with
#     `npm ci` from the committed package-lock.json into tests/integration/mcp/node_modules;
#   * PyPI: a venv with mcp==2.3.0 (the streamable-HTTP fixture server) and rebuno==0.29.2 (the
#     flattening parity oracle), pinned with their dependencies in tests/integration/mcp/requirements.txt.
#
#   tests/integration/mcp/setup.sh [VENV_DIR]     # VENV_DIR defaults to target/mcp-venv in the repository
#
# Prints the venv's python path on stdout (and nothing else); progress goes to stderr. Needs
# node 20+ with npm, and Python 3.11+ with venv ($PYTHON, default python3). Safe to run
# concurrently: callers serialize on a lock, and stamps (hashes of the lockfile and of the
# requirements) mark finished installs, so a second run returns at once and an edited pin
# reinstalls.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
dir="${1:-$root/target/mcp-venv}"
case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac
python="${PYTHON:-python3}"
requirements="$here/requirements.txt"
lockfile="$here/package-lock.json"

die() { printf 'mcp setup: %s\n' "$*" >&2; exit 1; }

[ -f "$requirements" ] || die "missing $requirements"
[ -f "$lockfile" ] || die "missing $lockfile"
npm_want="$(sha256sum "$lockfile" | cut -d' ' -f1)"
venv_want="$(sha256sum "$requirements" | cut -d' ' -f1)"
venv_python="$dir/bin/python"

npm_ready() { [ "$(cat "$here/node_modules/.rebuno-stamp" 2>/dev/null)" = "$npm_want" ]; }
venv_ready() { [ -x "$venv_python" ] && [ "$(cat "$dir/.rebuno-stamp" 2>/dev/null)" = "$venv_want" ]; }

if npm_ready && venv_ready; then
    printf '%s\n' "$venv_python"
    exit 0
fi

mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
if command -v flock >/dev/null 2>&1; then
    flock 9
fi

if ! npm_ready; then
    command -v node >/dev/null 2>&1 || die "'node' not found: the MCP tests need Node.js 20+ with npm"
    command -v npm >/dev/null 2>&1 || die "'npm' not found: the MCP tests need Node.js 20+ with npm"
    printf 'mcp setup: npm ci in %s\n' "$here" >&2
    (cd "$here" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >&2) ||
        die "npm ci failed in $here"
    for server in server-everything server-filesystem; do
        [ -f "$here/node_modules/@modelcontextprotocol/$server/dist/index.js" ] ||
            die "npm ci did not install @modelcontextprotocol/$server"
    done
    printf '%s\n' "$npm_want" >"$here/node_modules/.rebuno-stamp"
fi

if ! venv_ready; then
    command -v "$python" >/dev/null 2>&1 ||
        die "'$python' not found: the MCP tests need Python 3.11+ (set PYTHON=/path/to/python3)"
    "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' ||
        die "$("$python" --version 2>&1) is too old: rebuno 0.29.2 needs Python 3.11+ (set PYTHON=)"
    "$python" -c 'import venv, ensurepip' 2>/dev/null ||
        die "'$python' lacks venv/ensurepip (on Debian: apt-get install python3-venv)"
    printf 'mcp setup: creating %s\n' "$dir" >&2
    rm -rf "$dir"
    "$python" -m venv "$dir" >&2
    "$venv_python" -m pip install --quiet --disable-pip-version-check -r "$requirements" >&2 ||
        die "pip install -r $requirements failed"
    "$venv_python" -c 'import importlib.metadata as m; assert m.version("mcp") == "2.3.0" and m.version("rebuno") == "0.29.2"' >&2 ||
        die "the venv at $dir does not hold mcp 2.3.0 and rebuno 0.29.2"
    printf '%s\n' "$venv_want" >"$dir/.rebuno-stamp"
fi

printf '%s\n' "$venv_python"
