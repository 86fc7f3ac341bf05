#!/usr/bin/env bash
# The Parquet dataset checked by readers that share no code with its writer: a small generated
# job is converted by `gpu-ledger parquet`, pyarrow checks its files and DuckDB runs the SQL of
# docs/sql.md on it, compared with `gpu-ledger merge` and the embedded engine (`gpu-ledger sql`).
# Builds the CLI with feature `sql` (debug: the tests' dependencies are already built so).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-$PWD/target}
cargo build -p gpu-ledger-cli --features sql --bin gpu-ledger
cargo build --example parquet_scale
# The readers in a virtual environment of their own, at the versions this check was written for.
venv="$target/parquet-check-venv"
[[ -x $venv/bin/python ]] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check pyarrow==26.0.1 duckdb==2.0.1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin="$target/debug/gpu-ledger"
# The job: 8 ranks, one of which slows down for good (examples/common/job.rs); kept for the checks.
"$target/debug/examples/parquet_scale" --ranks 8 --iterations 300 --keep "$work"
for q in straggler spread scope-percentiles lag; do
  "$bin" sql "$work/dataset" --query "$q" --format csv >"$work/$q.csv"
done
"$bin" merge --format csv "$work"/ledgers/*.jsonl >"$work/merge.csv"
"$venv/bin/python" scripts/parquet_check.py "$work" docs/sql.md
