#!/usr/bin/env bash
# Host budgets of the current checkout, built the way users deploy:
#
#   scripts/host-budgets.sh            # from anywhere; prints a markdown table and the commands
#
# 1. Lambda: `cargo lambda build` of examples/lambda (TLS on: the example enables rebuno's
#    `rustls`) for x86_64-unknown-linux-gnu with the profile deploy/lambda/README.md uses;
#    the bootstrap's stripped size, and the size of the zip Lambda is given.
# 2. Lambda cold start: the bootstrap run again and again (a fresh process each time) under a
#    stub Runtime + Extensions API (Python, in this file), which answers the internal
#    extension's registration like Lambda and records when the runtime asks for its first
#    invocation (`GET /2018-06-01/runtime/invocation/next`). Process spawn to that request;
#    one unrecorded run first so the binary is in the page cache.
# 3. Workers: examples/workers built by the `[build] command` of deploy/workers/wrangler.toml
#    (what `wrangler deploy` runs), with the local wasm-bindgen and tests/workers' binaryen
#    wasm-opt and esbuild; raw and gzip -9 sizes of the module and of the JS shim.
#
# Environment: HOST_BUDGETS_TARGET_DIR (default target/host-budgets: its own target dir, so the
# figures never come from another build's artifacts and other builds are not blocked),
# HOST_BUDGETS_RUNS (cold starts measured, default 25), HOST_BUDGETS_SKIP (lambda or workers).
# Targets: bootstrap <= 3 MB, cold start p50 <= 10 ms, module <= 150 KB gzipped.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${HOST_BUDGETS_TARGET_DIR:-$root/target/host-budgets}"
runs="${HOST_BUDGETS_RUNS:-25}"
skip="${HOST_BUDGETS_SKIP:-}"
work="$CARGO_TARGET_DIR/host-budgets"
mkdir -p "$work"
commands=()
rows=()

say() { printf '==> %s\n' "$*" >&2; }
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }
# run DIR CMD...: runs CMD in DIR and records it (with the directory) for the report.
run() {
  local dir="$1" rel
  shift
  rel="${dir#"$root"}"
  rel="${rel#/}"
  commands+=("(cd ${rel:-.} && $(printf '%q ' "$@"))")
  say "$*"
  (cd "$dir" && "$@")
}
size() { wc -c <"$1" | tr -d ' '; }
gz() { gzip -9 -c "$1" | wc -c | tr -d ' '; }
kib() { awk -v b="$1" 'BEGIN { printf "%.1f KiB", b / 1024 }'; }
mb() { awk -v b="$1" 'BEGIN { printf "%.2f MB", b / 1e6 }'; }
row() { rows+=("| $1 | $2 | $3 | $4 |"); }

# The profile deploy/lambda/README.md builds with (`--release` or `--profile NAME`).
lambda_profile_args() {
  if grep -q '^\[profile\.deploy\]' "$root/Cargo.toml"; then
    echo "--profile deploy"
  else
    echo "--release"
  fi
}

lambda() {
  command -v cargo-lambda >/dev/null 2>&1 || fail "cargo-lambda missing: pip install cargo-lambda==1.9.2"
  local out="$CARGO_TARGET_DIR/lambda/bootstrap" bin stripped raw zipped profile
  # shellcheck disable=SC2207 # one or two words, no globbing
  profile=($(lambda_profile_args))
  rm -rf "$out" # never report a stale binary
  run "$root" cargo lambda build "${profile[@]}" --x86-64 -p rebuno-example-lambda
  bin="$out/bootstrap"
  [ -x "$bin" ] || fail "no bootstrap at $bin"
  cp "$bin" "$work/bootstrap.stripped"
  strip "$work/bootstrap.stripped" # a no-op when the profile strips already
  raw="$(size "$bin")"
  stripped="$(size "$work/bootstrap.stripped")"
  zipped="$(python3 - "$work/bootstrap.stripped" "$work/bootstrap.zip" <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[2], "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
    z.write(sys.argv[1], "bootstrap")
print(os.path.getsize(sys.argv[2]))
PY
)"
  [ "$raw" = "$stripped" ] || say "note: strip took the bootstrap from $raw to $stripped bytes"
  row "Lambda \`bootstrap\` (x86_64, TLS on, ${profile[*]}), stripped" "$stripped B ($(mb "$stripped"))" "<= 3 MB" \
    "$([ "$stripped" -le 3000000 ] && echo met || echo over)"
  row "Lambda \`bootstrap.zip\` (deflate -9)" "$zipped B ($(mb "$zipped"))" "-" "-"
  commands+=("python3 (stub Runtime API) x $((runs + 1)): $bin")
  say "cold start: $runs runs (plus one warm-up) under the stub Runtime API"
  local cold p50 max min cpu
  cold="$(cold_start "$bin" "$runs")"
  read -r p50 max min cpu <<<"$cold"
  row "Lambda cold start (spawn to first \`/next\`, $runs runs) p50 / max (min)" "$p50 ms / $max ms ($min ms)" \
    "p50 <= 10 ms" "$(awk -v p="$p50" 'BEGIN { print (p <= 10 ? "met" : "over") }')"
  row "Lambda init CPU time (all threads, at the first \`/next\`) p50" "$cpu ms" "-" "-"
}

# cold_start BOOTSTRAP RUNS: prints "p50 max min cpu-p50" in ms (cpu: the process's CPU time,
# all threads, when it asked for /next: what a loaded build machine does not inflate).
cold_start() {
  python3 - "$1" "$2" <<'PY'
import http.server, json, os, statistics, subprocess, sys, threading, time, uuid

bootstrap, runs = sys.argv[1], int(sys.argv[2])
lock = threading.Lock()
state = {}  # of the current process: started, registered, next, errors
first_next = threading.Event()
release = threading.Event()  # set between processes: lets blocked long-polls go


def cpu_ns(pid):
    """CPU time of all the process's threads so far (schedstat), robust to a loaded machine."""
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
    except OSError:
        return None
    return total


class Api(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def body(self):
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    def reply(self, status, payload, headers=()):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        self.body()
        if self.path == "/2020-01-01/extension/register":
            with lock:
                state["registered"] = time.monotonic_ns()
            self.reply(
                200,
                {"functionName": "rebuno-example-lambda", "functionVersion": "$LATEST", "handler": "bootstrap"},
                [("Lambda-Extension-Identifier", str(uuid.uuid4()))],
            )
        else:  # init/error, extension/init/error, ...
            with lock:
                state.setdefault("errors", []).append(self.path)
            self.reply(202, {"status": "OK"})

    def do_GET(self):
        if self.path == "/2018-06-01/runtime/invocation/next":
            now = time.monotonic_ns()
            with lock:
                if "next" not in state:
                    state["next"] = now
                    state["cpu"] = cpu_ns(state["pid"])
            first_next.set()
        elif self.path != "/2020-01-01/extension/event/next":
            self.reply(404, {"errorMessage": self.path})
            return
        # A long poll with no invocation: held until the process is killed.
        release.wait(30)
        self.close_connection = True


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a killed process's broken connection


server = Server(("127.0.0.1", 0), Api)
threading.Thread(target=server.serve_forever, daemon=True).start()
env = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{server.server_address[1]}",
    "AWS_LAMBDA_FUNCTION_NAME": "rebuno-example-lambda",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
    "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
    "AWS_LAMBDA_LOG_GROUP_NAME": "/aws/lambda/rebuno-example-lambda",
    "AWS_LAMBDA_LOG_STREAM_NAME": "2026/01/01/[$LATEST]0123456789abcdef",
    "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
    "AWS_REGION": "us-east-1",
    "_HANDLER": "bootstrap",
    "LAMBDA_TASK_ROOT": os.path.dirname(bootstrap),
    "TZ": ":UTC",
    # As examples/lambda/Cargo.toml deploys it (an https:// kernel: TLS is set up at init).
    "REBUNO_URL": "https://rebuno.example.com",
    "REBUNO_AGENT_ID": "lambda-example",
    "REBUNO_AGENT_SECRET": "host-budgets-secret",
    "RUST_LOG": "info",
}
times, cpus = [], []
for i in range(runs + 1):
    with lock:
        state.clear()
    first_next.clear()
    release.clear()
    started = time.monotonic_ns()
    proc = subprocess.Popen([bootstrap], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with lock:
        state["pid"] = proc.pid
    ok = first_next.wait(10)
    with lock:
        seen = dict(state)
    proc.kill()
    _, err = proc.communicate()
    release.set()
    if not ok:
        sys.exit(f"run {i}: no /next within 10 s; stderr:\n{err.decode(errors='replace')}")
    if seen.get("errors"):
        sys.exit(f"run {i}: the bootstrap reported {seen['errors']}")
    if "registered" not in seen or seen["registered"] > seen["next"]:
        sys.exit(f"run {i}: the extension did not register before the runtime's first /next")
    if i > 0:  # run 0 warms the page cache
        times.append((seen["next"] - started) / 1e6)
        if seen.get("cpu") is not None:
            cpus.append(seen["cpu"] / 1e6)
server.shutdown()
cpu = f"{statistics.median(cpus):.1f}" if cpus else "n/a"
print(f"{statistics.median(times):.1f} {max(times):.1f} {min(times):.1f} {cpu}")
print("cold starts (ms): " + " ".join(f"{t:.1f}" for t in sorted(times)), file=sys.stderr)
PY
}

workers() {
  local here="$root/tests/workers" cwd command stamp wasm shim
  command -v worker-build >/dev/null 2>&1 || fail "worker-build missing: cargo install worker-build --version 0.8.7 --locked"
  command -v wasm-bindgen >/dev/null 2>&1 || fail "wasm-bindgen missing: cargo install wasm-bindgen-cli --version 0.2.130"
  [ -x "$here/node_modules/.bin/wasm-opt" ] ||
    run "$here" npm ci --no-audit --no-fund --loglevel=error
  # The [build] of deploy/workers/wrangler.toml: what `wrangler deploy` runs, and where.
  read -r cwd command < <(python3 - "$root/deploy/workers/wrangler.toml" <<'PY'
import sys, tomllib
build = tomllib.load(open(sys.argv[1], "rb"))["build"]
print(build.get("cwd", "."), build["command"])
PY
)
  cwd="$(cd "$root/deploy/workers/$cwd" && pwd)"
  stamp="$work/workers.stamp"
  : >"$stamp"
  run "$cwd" env WASM_BINDGEN_BIN="$(command -v wasm-bindgen)" \
    WASM_OPT_BIN="$here/node_modules/.bin/wasm-opt" ESBUILD_BIN="$here/node_modules/.bin/esbuild" \
    bash -c "$command"
  wasm="$cwd/build/index_bg.wasm"
  shim="$cwd/build/index.js"
  for file in "$wasm" "$shim"; do
    [ "$file" -nt "$stamp" ] || fail "$file was not rebuilt"
  done
  local raw gzipped
  raw="$(size "$wasm")"
  gzipped="$(gz "$wasm")"
  row "Workers module \`index_bg.wasm\` raw / gzip -9" "$raw B ($(kib "$raw")) / $gzipped B ($(kib "$gzipped"))" \
    "<= 150 KB gzipped" "$([ "$gzipped" -le 153600 ] && echo met || echo over)"
  raw="$(size "$shim")"
  gzipped="$(gz "$shim")"
  row "Workers JS shim \`index.js\` raw / gzip -9" "$raw B ($(kib "$raw")) / $gzipped B ($(kib "$gzipped"))" "-" "-"
}

[ "$skip" = lambda ] || lambda
[ "$skip" = workers ] || workers

printf '\n## Host budgets at %s\n\n' "$(git -C "$root" describe --always --dirty 2>/dev/null || echo 'an unknown commit')"
printf '%s, %s, %s cores\n\n' "$(rustc --version)" "$(uname -m)" "$(nproc)"
printf '| measure | value | target | |\n|---|---|---|---|\n'
printf '%s\n' "${rows[@]}"
printf '\nCommands (CARGO_TARGET_DIR=%s):\n\n```sh\n' "${CARGO_TARGET_DIR#"$root"/}"
printf '%s\n' "${commands[@]}"
printf '```\n'
