#!/usr/bin/env bash
# End-to-end test of rebuno-workers in workerd (Miniflare) against the rebuno dev kernel.
#
#   tests/workers/run.sh            # from anywhere; honours CARGO_TARGET_DIR
#
# 1. installs the pinned toolchain when missing (worker-build 0.8.7, wasm-bindgen-cli 0.2.130's
#    `wasm-bindgen`, the wasm32 target: about 3 min on a fresh 2-core machine; skipped when
#    present), and npm ci (wrangler 4.86.0, miniflare, binaryen 132.0.0 from package-lock.json),
# 2. builds rebuno-dev and the E2B stand-in (tools/e2b-standin),
# 3. builds the example Worker (with its `rig` and `otel` features) with worker-build (nothing
#    fetched from GitHub),
# 4. makes the Python venv of scripts/interop-venv.sh (rotel, an OpenTelemetry collector, and
#    opentelemetry-proto: the OTLP receiver of the telemetry tests; skipped when present),
# 5. makes the venv of tests/integration/mcp/setup.sh (PyPI's mcp: the MCP fixture server; skipped when
#    present),
# 6. runs test.mjs, which prints the wasm size and closes with "N passed, M failed".
#
#   tests/workers/run.sh tools      # step 1 only (CI runs it, then `example`, beside its checks)
#   tests/workers/run.sh prepare    # step 2 only
#   tests/workers/run.sh example    # step 3 only (after tools)
#   tests/workers/run.sh build      # steps 1-5
#   tests/workers/run.sh test       # step 6 only, after a build
#
# WORKERS_TESTS=regex runs only the tests whose name matches.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin"
export PATH="$cargo_bin:$PATH"

step() { printf '==> %s\n' "$*" >&2; }

has_version() { # has_version <command> <version>
  command -v "$1" >/dev/null 2>&1 && "$1" --version 2>/dev/null | grep -qF "$2"
}

install_toolchain() ( # a subshell: its settings stay in it
  # worker-build and wasm-bindgen only drive the build: compiled without optimisation they are
  # ready in well under half the time (about 340 core-seconds for both instead of 10 minutes of
  # 2 cores; 16 codegen units took 8% less CPU than 256), and wasm-bindgen takes about a second
  # more per module. The profile keeps its name, so the README's `cargo install --locked
  # worker-build@0.8.7` finds them installed. A target directory of their own: CI compiles them
  # beside its checks.
  export CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
    CARGO_TARGET_DIR="$CARGO_TARGET_DIR/workers-tools"
  if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
    step "rustup target add wasm32-unknown-unknown"
    rustup target add wasm32-unknown-unknown
  fi
  if ! has_version worker-build 0.8.7; then
    step "cargo install worker-build 0.8.7"
    cargo install worker-build --version 0.8.7 --locked
  fi
  if ! has_version wasm-bindgen 0.2.130; then
    # As README.md's tool command installs it: the one binary worker-build runs, without TLS.
    # Not --locked: its lockfile pins a webpki-roots version missing from some registries.
    step "cargo install wasm-bindgen-cli 0.2.130 (wasm-bindgen only)"
    cargo install wasm-bindgen-cli --version 0.2.130 --no-default-features --bin wasm-bindgen
  fi
  step "npm ci"
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
)

prepare() {
  if [ -n "${REBUNO_BINARIES_FROM_TESTS:-}" ]; then
    # .ci/run: `cargo test --workspace` has just built both (integration tests run them), with
    # the test build's features; built again here with their own, they cost about 75 s.
    step "rebuno-dev and e2b-standin: the ones cargo test built"
    for bin in rebuno-dev e2b-standin; do
      [ -x "$CARGO_TARGET_DIR/debug/$bin" ] || { echo "REBUNO_BINARIES_FROM_TESTS is set but $CARGO_TARGET_DIR/debug/$bin is missing: run cargo test --workspace first" >&2; exit 1; }
    done
  else
    step "cargo build rebuno-dev e2b-standin"
    # One command each: rebuno-dev then builds as scripts/fresh-projects.sh builds it (the same
    # features), so there it is already built; together they built the core twice (about 60 s).
    (cd "$root" && cargo build --quiet -p rebuno-devkernel --bin rebuno-dev &&
      cargo build --quiet -p rebuno-e2b-standin --bin e2b-standin)
  fi
}

build_example() {
  step "worker-build --release (examples/workers)"
  # Local tools instead of worker-build's downloads from GitHub; size settings via the
  # environment so the workspace's release profile stays as it is. WORKERS_TARGET_DIR: a
  # target directory of its own, so that other cargo commands need not wait for this one.
  (
    cd "$root/examples/workers"
    CARGO_TARGET_DIR="${WORKERS_TARGET_DIR:-$CARGO_TARGET_DIR}" \
      WASM_BINDGEN_BIN="$(command -v wasm-bindgen)" \
      WASM_OPT_BIN="$here/node_modules/.bin/wasm-opt" \
      ESBUILD_BIN="$here/node_modules/.bin/esbuild" \
      CARGO_PROFILE_RELEASE_OPT_LEVEL=z \
      CARGO_PROFILE_RELEASE_LTO=true \
      CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 \
      CARGO_PROFILE_RELEASE_STRIP=symbols \
      worker-build --release . --features rig,otel # both opt-in (see its Cargo.toml)
  )
}

run_tests() {
  local mcp_python otlp_python # both made by the build phase; this only reads their paths
  mcp_python="$("$root/tests/integration/mcp/setup.sh")"
  otlp_python="$("$root/scripts/interop-venv.sh")"
  step "node test.mjs"
  cd "$here"
  MCP_PYTHON="$mcp_python" \
    OTLP_PYTHON="$otlp_python" \
    REBUNO_DEV_BIN="$CARGO_TARGET_DIR/debug/rebuno-dev" \
    E2B_STANDIN_BIN="$CARGO_TARGET_DIR/debug/e2b-standin" \
    WORKER_BUILD_DIR="$root/examples/workers/build" \
    node test.mjs
}

phase="${1:-all}"
case "$phase" in
  tools) install_toolchain ;;
  prepare) prepare ;;
  example) build_example ;;
  build | all)
    install_toolchain
    prepare
    build_example
    step "scripts/interop-venv.sh (rotel, opentelemetry-proto)"
    "$root/scripts/interop-venv.sh" >/dev/null
    step "tests/integration/mcp/setup.sh (the MCP fixture's venv)"
    "$root/tests/integration/mcp/setup.sh" >/dev/null
    ;;& # `all` goes on to the tests
  test | all) run_tests ;;
  build | tools | prepare | example) ;;
  *) echo "usage: tests/workers/run.sh [tools|prepare|example|build|test]" >&2; exit 2 ;;
esac
