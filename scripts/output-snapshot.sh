#!/usr/bin/env bash
# Every command of a `gpu-ledger` binary on every golden and corpus ledger, with the ledger held
# whole and streamed (--hold-bytes 0), each output and exit status in one file of DIR. Two
# binaries' snapshots compared with `diff -r` show whether a change moved any output byte:
#   scripts/output-snapshot.sh OLD_BIN /tmp/old; scripts/output-snapshot.sh NEW_BIN /tmp/new
#   diff -r /tmp/old /tmp/new
set -uo pipefail
bin=$(realpath "$1")
out=$2
cd "$(dirname "$0")/.."
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ledgers=(tests/data/*.jsonl tests/corpus/*.jsonl)
# One case: NAME, then the command's arguments. Output files go to $work and are appended.
case_() {
  local name=$1
  shift
  rm -rf "$work"/*
  {
    (cd "$work" && "$bin" "$@" 2>&1)
    echo "exit: $?"
    (cd "$work" && find . -type f | sort) | while read -r f; do
      echo "--- file $f"
      if [[ $f == *.parquet ]]; then md5sum <"$work/$f"; else cat "$work/$f"; fi
    done
  } | sed -e "s#$PWD/##g" -e "s#$work#WORK#g" >"$out/$name"
  ((n++))
}
n=0
for hold in default 0; do
  h=()
  [[ $hold == 0 ]] && h=(--hold-bytes 0)
  for l in "${ledgers[@]}"; do
    p=$PWD/$l
    b=$(basename "$l" .jsonl)-$hold
    case_ "summary-$b" "${h[@]}" summary "$p"
    case_ "summary-nowarm-$b" "${h[@]}" summary "$p" --warmup none --include-perturbed --include-incomplete --include-untraced
    case_ "report-$b" "${h[@]}" report "$p" -o r.html --title t
    case_ "csv-$b" "${h[@]}" csv "$p" -o r.csv
    case_ "trace-$b" "${h[@]}" trace "$p" -o r.json
    case_ "trace-range-$b" "${h[@]}" trace "$p" -o r.json --iterations 1..3 --no-demangle
    case_ "check-$b" "${h[@]}" check "$p"
    case_ "compare-self-$b" "${h[@]}" compare "$p" "$p" --seed 7 --resamples 500
  done
  d=$PWD/tests/data
  case_ "compare-ab-$hold" "${h[@]}" compare "$d/v1-ab-baseline.jsonl" "$d/v1-ab-change.jsonl" --seed 7
  case_ "compare-ab-busy-$hold" "${h[@]}" compare "$d/v1-ab-baseline.jsonl" "$d/v1-ab-change.jsonl" --seed 7 --metric device-busy --warmup 2
  case_ "compare-log-$hold" "${h[@]}" compare "$d/v1-ab-baseline.jsonl" "$d/v1-ab-change.jsonl" --seed 7 --hypothesis h --change c --experiment-log log
  case_ "compare-mixed-$hold" "${h[@]}" compare "$d/v1-rank0.jsonl" "$d/v1-graph-kernels.jsonl" --seed 3
  case_ "merge-$hold" "${h[@]}" merge "$d/v1-rank0.jsonl" "$d/v1-rank1.jsonl"
  case_ "merge-csv-$hold" "${h[@]}" merge "$d/v1-rank0.jsonl" "$d/v1-rank1.jsonl" --format csv
  case_ "trace-ranks-$hold" "${h[@]}" trace "$d/v1-rank0.jsonl" "$d/v1-rank1.jsonl" -o r.json
  case_ "parquet-$hold" "${h[@]}" parquet "$d/v1-rank0.jsonl" "$d/v1-rank1.jsonl" -o ds --threads 1
  case_ "summary-family-$hold" "${h[@]}" summary "$d/v1-ab-baseline.jsonl" --family-rule substr:gemm=GEMM --top 2
done
echo "output-snapshot: $n cases in $out"
