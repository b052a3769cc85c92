#!/usr/bin/env bash
# Builds the projects the docs show as new projects outside the workspace (path dependencies,
# default features, the code exactly as the docs show it, marked `<!-- fresh: ... -->`; see
# scripts/fresh/extract.py): the README's quick starts, each running one execution against
# rebuno-dev, and a new user's walkthrough, whose tests run.
#
#   scripts/fresh-projects.sh                 # axum hyper lambda worker walkthrough
#   scripts/fresh-projects.sh axum hyper      # some of them
#
# axum and hyper: the server serves the webhook, the execution completes, SIGTERM drains and
# exits 0 (and axum's own route still answers). lambda: `cargo lambda build --release`,
# `cargo lambda deploy --dry` (which must not print a secret), then the bootstrap under the
# freezing lambda-simulator. worker: `worker-build --release`, then a run in workerd. The
# lambda and worker hosts need the tools .ci/run installs (cargo-lambda; worker-build,
# wasm-bindgen-cli and tests/workers' npm packages). walkthrough: the testing guide's crate
# (devkernel/docs/testing.md, "A whole crate": a triage agent with a durable LLM call against a
# loopback stub, tools of both idempotencies, a local step and a policy with an approval) with,
# beside its own four tests, every test snippet of the guide and of the README as a
# `#[tokio::test]`, all run by `cargo test` with only the dependencies its Cargo.toml declares.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${FRESH_DIR:-$root/target/fresh}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
hosts=("$@")
[ ${#hosts[@]} -gt 0 ] || hosts=(axum hyper lambda worker walkthrough)
secret="fresh-secret"
pids=()

say() { printf '==> %s\n' "$*" >&2; }
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_http() { # wait_http URL
  for _ in $(seq 1 300); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.1; done
  fail "nothing answered at $1"
}

# start_kernel WEBHOOK_URL: rebuno-dev with the agent "hello"; sets kernel_url.
start_kernel() {
  local port manifest
  port="$(free_port)"
  manifest="$out/manifest-$port.yaml"
  printf 'agents:\n  - id: hello\n    webhook_url: %s\n    secret: %s\n    lease_timeout_seconds: 10\n' "$1" "$secret" >"$manifest"
  RUST_LOG="${RUST_LOG:-warn}" "$dev" --config "$manifest" --addr "127.0.0.1:$port" &
  pids+=($!)
  kernel_pid=$!
  kernel_url="http://127.0.0.1:$port"
  wait_http "$kernel_url/v0/health"
}

# expect_hello: creates an execution of "hello" with "Ada" through the CLI, as the README does,
# and checks its output.
expect_hello() {
  local watched id output
  watched="$(REBUNO_URL="$kernel_url" "$dev" exec create hello '"Ada"' --watch)" || fail "the execution did not complete:
$watched"
  id="${watched%% *}" # the first line is "<id> <status>"
  output="$(curl -fsS "$kernel_url/v0/executions/$id" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("output"))')"
  [ "$output" = "hello, Ada" ] || fail "output was ${output:-none}, expected \"hello, Ada\""
  say "completed: \"$output\""
}

prepare() { # prepare HOST: the project dir, with the workspace's lock file for the same versions
  local dir="$out/$1"
  cp "$root/Cargo.lock" "$dir/Cargo.lock"
  echo "$dir"
}

server_host() { # server_host HOST
  local host="$1" dir port pid status
  dir="$(prepare "$host")"
  say "$host: cargo build (a new project, default features)"
  cargo build --quiet --manifest-path "$dir/Cargo.toml"
  port="$(free_port)"
  start_kernel "http://127.0.0.1:$port/webhook"
  ADDR="127.0.0.1:$port" REBUNO_URL="$kernel_url" REBUNO_AGENT_SECRET="$secret" RUST_LOG=warn \
    "$CARGO_TARGET_DIR/debug/hello-$host" &
  pid=$!
  pids+=("$pid")
  if [ "$host" = axum ]; then
    wait_http "http://127.0.0.1:$port/"
    [ "$(curl -fsS "http://127.0.0.1:$port/")" = "my app" ] || fail "axum's own route"
  else
    wait_http "http://127.0.0.1:$port/healthz"
  fi
  expect_hello
  kill -TERM "$pid"
  status=0
  wait "$pid" || status=$?
  [ "$status" -eq 0 ] || fail "$host exited $status after SIGTERM"
  say "$host: SIGTERM drained and exited 0"
  kill "$kernel_pid"
}

lambda_host() {
  local dir dry
  dir="$(prepare lambda)"
  command -v cargo-lambda >/dev/null 2>&1 || python3 -m pip install --quiet cargo-lambda==1.9.2
  # CI builds the function in debug (its dependencies are the ones `cargo test` built);
  # FRESH_FULL_RELEASE=1 builds it as the README says, `--release` (about 5 min from scratch).
  local profile=()
  [ -n "${FRESH_FULL_RELEASE:-}" ] && profile=(--release)
  say "lambda: cargo lambda build ${profile[*]}"
  (cd "$dir" && cargo lambda build "${profile[@]}")
  say "lambda: cargo lambda deploy --dry"
  dry="$(cd "$dir" && REBUNO_AGENT_SECRET="$secret" cargo lambda deploy --dry hello-lambda 2>&1)" || fail "deploy --dry: $dry"
  printf '%s\n' "$dry" | tail -n 5
  if printf '%s' "$dry" | grep -qF "$secret"; then fail "deploy --dry printed the secret"; fi
  say "lambda: the bootstrap under the freezing simulator"
  (cd "$root" && REBUNO_LAMBDA_BOOTSTRAP="$CARGO_TARGET_DIR/lambda/hello-lambda/bootstrap" \
    REBUNO_LAMBDA_AGENT=hello REBUNO_LAMBDA_INPUT='"Ada"' REBUNO_LAMBDA_OUTPUT='"hello, Ada"' \
    cargo test --quiet -p rebuno-lambda --test simulator -- --ignored packaged_bootstrap_completes_one_execution)
}

worker_host() {
  local dir
  dir="$(prepare worker)"
  [ -d "$root/tests/workers/node_modules" ] ||
    (cd "$root/tests/workers" && npm ci --no-audit --no-fund --loglevel=error)
  say "worker: cargo check (the project's .cargo/config.toml targets wasm32)"
  (cd "$dir" && cargo check --quiet)
  say "worker: worker-build --release"
  (cd "$dir" && WASM_BINDGEN_BIN="$(command -v wasm-bindgen)" \
    WASM_OPT_BIN="$root/tests/workers/node_modules/.bin/wasm-opt" \
    ESBUILD_BIN="$root/tests/workers/node_modules/.bin/esbuild" \
    worker-build --release >/dev/null)
  say "worker: one execution in workerd"
  (cd "$root/tests/workers" && REBUNO_DEV_BIN="$dev" node fresh.mjs "$dir/build")
}

# The testing guide's crate: its tests, and the docs' test snippets as tests of a new crate.
walkthrough_project() {
  local dir
  dir="$(prepare walkthrough)"
  say "walkthrough: cargo test (the testing guide's crate, and the docs' test snippets)"
  cargo test --quiet --no-fail-fast --manifest-path "$dir/Cargo.toml" || fail "walkthrough: a test of the docs' snippets failed (above)"
}

rm -rf "$out"
mkdir -p "$out"
python3 "$root/scripts/fresh/extract.py" "$out" "$root/README.md" "$root/devkernel/docs/testing.md" >/dev/null
cargo build --quiet --manifest-path "$root/Cargo.toml" -p rebuno-devkernel --bin rebuno-dev
dev="$CARGO_TARGET_DIR/debug/rebuno-dev"
for host in "${hosts[@]}"; do
  case "$host" in
    axum | hyper) server_host "$host" ;;
    lambda) lambda_host ;;
    worker) worker_host ;;
    walkthrough) walkthrough_project ;;
    *) fail "unknown project $host (axum, hyper, lambda, worker, walkthrough)" ;;
  esac
done
say "fresh projects: ${hosts[*]} passed"
