#!/usr/bin/env bash
# Builds the projects the docs show as new projects outside the workspace (path dependencies,
# default features, the code exactly as the docs show it, marked `<!-- fresh: ... -->`; see
# scripts/fresh/extract.py): the README's quick starts, each running one execution against
# rebuno-dev, and a new user's walkthrough, whose tests run.
#
#   scripts/fresh-projects.sh                 # axum hyper lambda worker worker-do walkthrough
#   scripts/fresh-projects.sh axum hyper      # some of them
#
# CARGO_TARGET_DIR (default: the workspace's target/) holds their builds; WORKERS_TARGET_DIR, when
# set, the Workers projects' (.ci/run: the example Worker's, to share its dependencies).
#
# Every host also runs the README's "Run it against the dev kernel" block for it (`dev.sh`, with
# its `dev.yaml`) as written, on free ports instead of the README's (8080, 3000, 9000, 8787),
# with this workspace's rebuno-dev first on PATH: the kernel and the agent in the background,
# then `rebuno-dev exec create hello '"Ada"' --watch`, which must complete with "hello, Ada".
#
# axum and hyper: besides, the server serves the webhook, SIGTERM drains and exits 0 (and axum's
# own route still answers). lambda: `cargo lambda build`, `cargo lambda deploy --dry` (which must
# not print a secret), the bootstrap under the freezing lambda-simulator, then the walkthrough
# under `cargo lambda watch`. worker and worker-do (Durable Object mode): the README's tool
# command (`tools.sh`, with `npm install` served offline by tests/workers' node_modules, whose
# versions must be the ones the README's package.json pins), then the walkthrough under
# `npx wrangler dev --local`, which builds the project with its wrangler.toml's `[build]`
# command; the Worker's console must show the run (`run started`), and the module's gzipped size
# must be within 10% of the figure the README states. They need the tools .ci/run installs
# (cargo-lambda; worker-build, wasm-bindgen-cli and tests/workers' npm packages). walkthrough:
# the testing guide's crate (devkernel/docs/testing.md, "A whole crate": a triage agent with a
# durable LLM call against a loopback stub, tools of both idempotencies, a local step and a
# policy with an approval) with, beside its own four tests, every test snippet of the guide and
# of the README as a `#[tokio::test]`, all run by `cargo test` with only the dependencies its
# Cargo.toml declares.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${FRESH_DIR:-$root/target/fresh}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
hosts=("$@")
[ ${#hosts[@]} -gt 0 ] || hosts=(axum hyper lambda worker worker-do walkthrough)
secret="fresh-secret"
pids=()

say() { printf '==> %s\n' "$*" >&2; }
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }
cleanup() { for pid in "${pids[@]}"; do kill -- "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT

# free_port: a loopback port free a moment ago, from the 6,000 right below the kernel's ephemeral
# range (tests/workers/test.mjs, which runs beside this script in CI, takes the 6,000 below those):
# a port from bind(0) can be taken by any outgoing connection before the kernel or agent started
# on it binds it.
free_port() {
  python3 - "$out/ports-handed-out" <<'PY'
import random, socket, sys
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0]) - 6000
handed = open(sys.argv[1], "a+"); handed.seek(0); taken = set(handed.read().split())
for _ in range(100):
    port = random.randrange(low, low + 6000) if low >= 1024 else 0
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    port = s.getsockname()[1]
    if str(port) not in taken:
        handed.write(f"{port}\n"); print(port); sys.exit(0)
sys.exit("no free loopback port")
PY
}

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

# walk HOST [TIMEOUT]: the README's dev-kernel walkthrough of HOST (its dev.sh and dev.yaml), as
# written but on free ports, in a session of its own (killed whole afterwards); its output in
# $out/HOST-dev.log, which must show the execution completed with "hello, Ada".
walk() {
  local host="$1" limit="${2:-600}" dir kernel agent log pid status=0
  dir="$out/$host"
  kernel="$(free_port)"
  agent="$(free_port)"
  log="$out/$host-dev.log"
  sed -E -i "s/\b8080\b/$kernel/g; s/\b(3000|8787|9000)\b/$agent/g" "$dir/dev.sh" "$dir/dev.yaml"
  say "$host: the README's walkthrough against rebuno-dev (log: $log)"
  # CLOUDFLARE_CF_FETCH_ENABLED=false: wrangler dev does not fetch request.cf data from
  # workers.cloudflare.com, which offline costs each Worker run 20-40 s of waiting.
  (cd "$dir" && PATH="$(dirname "$dev"):$PATH" CLOUDFLARE_CF_FETCH_ENABLED=false \
    exec setsid timeout "$limit" bash dev.sh) >"$log" 2>&1 &
  pid=$!
  pids+=("-$pid")
  wait "$pid" || status=$?
  kill -- "-$pid" 2>/dev/null || true
  grep -qF '"output":"hello, Ada"' "$log" && [ "$status" -eq 0 ] ||
    fail "$host: the walkthrough did not complete (exit $status); the end of $log:
$(tail -n 40 "$log")"
  say "$host: the walkthrough's execution completed: \"hello, Ada\""
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
  walk "$host"
}

lambda_host() {
  local dir dry
  dir="$(prepare lambda)"
  command -v cargo-lambda >/dev/null 2>&1 || python3 -m pip install --quiet cargo-lambda==1.9.2
  # CI builds the function in debug (its dependencies are the ones `cargo test` built);
  # FRESH_FULL_RELEASE=1 builds it as the README says, `--release` (about 5 min from scratch).
  local profile=()
  [ -n "${FRESH_FULL_RELEASE:-}" ] && profile=(--release)
  # With cargo as the compiler (cargo-lambda's default, zig, cross-links against an old glibc)
  # the build's target is the host's, named: `cargo lambda watch` below then builds for that
  # named target too and finds everything built (it rebuilt every dependency otherwise, ~60 s).
  local compiler="${CARGO_LAMBDA_COMPILER:-cargo}" lambda_env
  lambda_env=(CARGO_LAMBDA_COMPILER="$compiler")
  [ "$compiler" != cargo ] || lambda_env+=(CARGO_BUILD_TARGET="$(rustc -vV | sed -n 's/^host: //p')")
  say "lambda: cargo lambda build ${profile[*]} (${lambda_env[*]})"
  (cd "$dir" && env "${lambda_env[@]}" cargo lambda build "${profile[@]}")
  say "lambda: cargo lambda deploy --dry"
  dry="$(cd "$dir" && REBUNO_AGENT_SECRET="$secret" cargo lambda deploy --dry hello-lambda 2>&1)" || fail "deploy --dry: $dry"
  printf '%s\n' "$dry" | tail -n 5
  if printf '%s' "$dry" | grep -qF "$secret"; then fail "deploy --dry printed the secret"; fi
  say "lambda: the bootstrap under the freezing simulator"
  (cd "$root" && REBUNO_LAMBDA_BOOTSTRAP="$CARGO_TARGET_DIR/lambda/hello-lambda/bootstrap" \
    REBUNO_LAMBDA_AGENT=hello REBUNO_LAMBDA_INPUT='"Ada"' REBUNO_LAMBDA_OUTPUT='"hello, Ada"' \
    cargo test --quiet --workspace --test simulator -- --ignored packaged_bootstrap_completes_one_execution)
  (export "${lambda_env[@]}" && walk lambda)
}

# npm_offline DIR: a directory with an `npm` for the README's tool command: `npm install` links
# tests/workers' node_modules (npm ci'd from its lock) into the project, after checking that each
# package the project's package.json pins is installed there at that version.
npm_offline() {
  local shim="$out/npm-offline"
  mkdir -p "$shim"
  cat >"$shim/npm" <<SHIM
#!/usr/bin/env bash
set -euo pipefail
[ "\$*" = install ] || exec "$(command -v npm)" "\$@"
node -e '
const fs = require("fs");
const pinned = JSON.parse(fs.readFileSync("package.json", "utf8")).devDependencies;
for (const [name, version] of Object.entries(pinned)) {
  const have = JSON.parse(fs.readFileSync("$root/tests/workers/node_modules/" + name + "/package.json", "utf8")).version;
  if (have !== version) throw new Error(\`package.json pins \${name} \${version}, tests/workers has \${have}: keep them equal\`);
}'
ln -sfn "$root/tests/workers/node_modules" node_modules
echo "npm install: linked tests/workers/node_modules (offline)"
SHIM
  chmod +x "$shim/npm"
  echo "$shim"
}

worker_host() { # worker_host HOST: worker or worker-do
  local host="$1" dir shim size stated
  dir="$(prepare "$host")"
  [ -d "$root/tests/workers/node_modules" ] ||
    (cd "$root/tests/workers" && npm ci --no-audit --no-fund --loglevel=error)
  shim="$(npm_offline)"
  say "$host: the README's tool command: $(cat "$dir/tools.sh")"
  (cd "$dir" && PATH="$shim:$PATH" bash -e tools.sh)
  if [ "$host" = worker ]; then
    # What a plain `cargo check` or rust-analyzer in the project relies on. (Running `cargo check`
    # itself cost a wasm32 check of every dependency, about 65 s, for what the walkthrough's
    # build below compiles anyway.)
    say "worker: the project's .cargo/config.toml makes wasm32 the default target"
    python3 -c 'import sys, tomllib; t = tomllib.load(open(sys.argv[1], "rb")).get("build", {}).get("target"); sys.exit(0 if t == "wasm32-unknown-unknown" else f"build.target is {t!r}, not wasm32-unknown-unknown")' \
      "$dir/.cargo/config.toml" || fail "worker: .cargo/config.toml"
  fi
  # wrangler dev builds it first: worker-build --release, from its wrangler.toml. In
  # WORKERS_TARGET_DIR when set (.ci/run: the example Worker's, whose release profile is the
  # README's: its dependencies with the same features are built already, 54 of 110 core-seconds).
  CARGO_TARGET_DIR="${WORKERS_TARGET_DIR:-$CARGO_TARGET_DIR}" walk "$host" 1200
  grep -qE 'execution_id=.*run started|run started.*execution_id=' "$out/$host-dev.log" ||
    fail "$host: wrangler dev's console showed no \`run started\` line: does the quick start call init_logging?"
  size="$(gzip -9 -c "$dir/build/index_bg.wasm" | wc -c)"
  stated="$(stated_size "$host")"
  say "$host: build/index_bg.wasm is $(($(wc -c <"$dir/build/index_bg.wasm") / 1024)) KiB, $((size / 1024)) KiB gzipped (the README states about $stated KiB)"
  [ "$size" -le $((stated * 1024 * 11 / 10)) ] ||
    fail "$host: the module is $((size / 1024)) KiB gzipped, more than 10% over the README's $stated KiB"
}

# stated_size HOST: the gzipped module size, in KiB, that the README states for HOST.
stated_size() {
  local pattern
  case "$1" in
    worker) pattern='The module, `build/index_bg.wasm`, is about ([0-9]+) KiB gzipped' ;;
    worker-do) pattern='Its module is about ([0-9]+) KiB gzipped' ;;
  esac
  python3 -c 'import re,sys; m=re.search(sys.argv[1], open(sys.argv[2]).read()); print(m.group(1) if m else 0)' \
    "$pattern" "$root/README.md"
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
dev="$CARGO_TARGET_DIR/debug/rebuno-dev"
# REBUNO_BINARIES_FROM_TESTS (.ci/run): the one `cargo test --workspace` built.
[ -n "${REBUNO_BINARIES_FROM_TESTS:-}" ] && [ -x "$dev" ] ||
  cargo build --quiet --manifest-path "$root/Cargo.toml" -p rebuno-devkernel --bin rebuno-dev
for host in "${hosts[@]}"; do
  started=$SECONDS
  case "$host" in
    axum | hyper) server_host "$host" ;;
    lambda) lambda_host ;;
    worker | worker-do) worker_host "$host" ;;
    walkthrough) walkthrough_project ;;
    *) fail "unknown project $host (axum, hyper, lambda, worker, worker-do, walkthrough)" ;;
  esac
  say "$host: passed in $((SECONDS - started)) s"
done
say "fresh projects: ${hosts[*]} passed"
