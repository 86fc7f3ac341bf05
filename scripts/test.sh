#!/usr/bin/env bash
# The project's test command. Runs every CPU test; on a machine with an NVIDIA GPU it also runs
# the GPU tests (tests/gpu/), one at a time. CI (no GPU) runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --all-targets
cargo test --workspace --doc
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L | grep -c '^GPU ')
  skip=()
  # The counters tests start this example as a second process that holds the counters.
  cargo build --release --example counters_probe
  if (( gpus < 2 )); then
    echo "one GPU here: the two-GPU tests (multi_gpu::) are not run; run this script on a host with two"
    skip+=(--skip multi_gpu::)
  fi
  echo "NVIDIA GPU found ($gpus): running the GPU tests"
  cargo test --release --test gpu -- --ignored --test-threads=1 --nocapture "${skip[@]}"
else
  echo "no NVIDIA GPU here: GPU tests (tests/gpu/) not run; run this script on a GPU host"
fi
