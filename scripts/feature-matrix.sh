#!/usr/bin/env bash
# Checks that every feature of the core builds on its own and with the others, on native, and
# on wasm32 where the crate says it does (docs/crate.md, "Features"):
#
#   scripts/feature-matrix.sh          # every feature alone (about 7 min from scratch on 2 cores)
#   scripts/feature-matrix.sh --quick  # CI (about 2 min): the heavy integrations (rig,
#                                      # async-openai, sqlite, rmcp) only together, as clippy
#                                      # --all-features checks them
#
# Native: no features, each feature alone, all together. wasm32: the defaults, and each feature
# documented for wasm32 alone (dir, sqlite, async-openai and the rmcp features are native only;
# e2b runs on both).
set -euo pipefail
cd "$(dirname "$0")/.."

native=(reqwest rustls rt-tokio schemars dir rig async-openai sqlite e2b mcp-rmcp mcp-stdio opentelemetry)
wasm=(reqwest rustls rt-tokio schemars rig e2b opentelemetry)
quick=""
if [ "${1:-}" = --quick ]; then
  quick=1
  # The features whose code is gated on its own (rt-tokio carries HyperTransport, rustls its
  # TLS); the rest are checked through the defaults and clippy's --no-default-features run.
  native=(reqwest rt-tokio schemars dir e2b opentelemetry)
  wasm=(reqwest rig e2b opentelemetry)
fi

check() { # check <target> <args...>
  local target="$1"
  shift
  printf '  %-24s %s\n' "$target" "$*"
  # The host's checks name no --target: they then share target/debug with clippy's, so each
  # rechecks only the crates whose features differ (with --target they rebuilt every dependency).
  if [ "$target" = "$host" ]; then
    cargo check --quiet -p rebuno --lib "$@"
  else
    cargo check --quiet -p rebuno --lib --target "$target" "$@"
  fi
}

host="$(rustc -vV | sed -n 's/^host: //p')"
# --quick leaves out no features and all features: .ci/run's clippy checks both (`-p rebuno
# --no-default-features`, and `--workspace --all-targets`, whose tests' dev-dependency on rebuno
# turns every feature on).
[ -n "$quick" ] || check "$host" --no-default-features
for feature in "${native[@]}"; do check "$host" --no-default-features --features "$feature"; done
# A slim native build: the hyper transport with TLS and no reqwest (what a small Lambda uses).
check "$host" --no-default-features --features rt-tokio,rustls
[ -n "$quick" ] || check "$host" --all-features
check wasm32-unknown-unknown # the defaults: what a Workers crate gets with `rebuno = "0.1"`
for feature in "${wasm[@]}"; do check wasm32-unknown-unknown --no-default-features --features "$feature"; done
echo "feature matrix: ${#native[@]} native features, ${#wasm[@]} wasm32 features, each alone and together: ok"
