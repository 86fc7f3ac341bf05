#!/usr/bin/env bash
# Peak resident memory and wall time of every gpu-ledger command on a million distinct scope
# names and a million distinct kernel names, side by side with the row-count case
# (gpu-ledger-cli/examples/names_scale.rs); exits non-zero when a command peaks above 256 MB.
#   scripts/names-scale.sh [ROWS [DIR]]
# ROWS: rows of the row-count case (default 1000000). DIR: where the ledgers (about 0.5 GB with
# the default) are written, and removed after; a temporary directory when left out.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL=0
cargo build --release -p gpu-ledger-cli --bin gpu-ledger --example names_scale
if [[ -n ${2:-} ]]; then
  mkdir -p "$2"
  trap 'rm -f "$2"/rows.jsonl "$2"/scope-names.jsonl "$2"/kernel-names.jsonl' EXIT
fi
target/release/examples/names_scale "${1:-1000000}" ${2:+"$2"}
