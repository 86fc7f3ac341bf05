#!/usr/bin/env bash
# The project's test command. Runs every CPU test; on a machine with an NVIDIA GPU it also runs
# the GPU tests (tests/gpu/), one at a time. CI (no GPU) runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --all-targets
cargo test --workspace --doc
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "NVIDIA GPU found: running the GPU tests"
  cargo test --release --test gpu -- --ignored --test-threads=1 --nocapture
else
  echo "no NVIDIA GPU here: GPU tests (tests/gpu/) not run; run this script on a GPU host"
fi
