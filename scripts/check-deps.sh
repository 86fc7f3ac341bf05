#!/usr/bin/env bash
# An application that depends on gpu-ledger with the default features must compile neither the
# command-line tool's crates (clap), the analysis' (cpp_demangle, sketches-ddsketch), the tracing
# layer's (tracing-subscriber), the Parquet writer's (arrow-array, parquet), the SQL engine's
# (datafusion) nor the kernel suite's (half, cudarc's cuBLAS and NVRTC bindings).
# Fails naming what it found. The same check with every feature on must find them all, or the
# check itself is broken.
set -euo pipefail
cd "$(dirname "$0")/.."

# What `cargo tree` shows of the normal dependencies with these feature arguments.
found() {
  local tree cudarc out=()
  tree=$(cargo tree -p gpu-ledger -e normal,features --prefix none "$@")
  cudarc=$(cargo tree -p gpu-ledger -e normal,features --prefix none -i cudarc "$@")
  for crate in clap cpp_demangle sketches-ddsketch half tracing-subscriber arrow-array parquet datafusion; do
    grep -qE "^$crate v" <<<"$tree" && out+=("$crate")
  done
  for feature in cublas nvrtc; do
    grep -q "^cudarc feature \"$feature\"" <<<"$cudarc" && out+=("cudarc/$feature")
  done
  echo "${out[*]:-}"
}

default=$(found)
if [[ -n $default ]]; then
  echo "check-deps: with the default features gpu-ledger compiles $default; put it behind the feature that needs it (Cargo.toml [features])" >&2
  exit 1
fi
all=$(found --features cli,kernels,tracing,sql)
if [[ $all != "clap cpp_demangle sketches-ddsketch half tracing-subscriber arrow-array parquet datafusion cudarc/cublas cudarc/nvrtc" ]]; then
  echo "check-deps: the check is broken: with --features cli,kernels,tracing,sql it found '$all'" >&2
  exit 1
fi
# The writer and DataFusion read and write with one arrow: two versions would compile twice and
# could not pass arrays between them.
arrows=$(cargo tree -p gpu-ledger -e normal --prefix none --features sql | grep -E '^arrow-array v' | sed -E 's/ \(\*\)$//' | sort -u)
if [[ $(wc -l <<<"$arrows") != 1 ]]; then
  echo "check-deps: with feature sql the tree holds several arrow versions: $(tr '\n' ' ' <<<"$arrows"); align the parquet and arrow-* versions in Cargo.toml with DataFusion's" >&2
  exit 1
fi
# cudarc's CUDA version and linking mode are the application's: any that gpu-ledger's normal
# dependencies turned on would be unified into the application's cudarc.
forced() {
  cargo tree -p gpu-ledger -e normal,features --prefix none -i cudarc "$@" |
    grep -oE '^cudarc feature "(cuda-[0-9]+|cuda-version-from-build-system|fallback-latest|(fallback-)?dynamic-loading|dynamic-linking|static-linking|default)"' |
    sed 's/^cudarc feature //' | tr '\n' ' ' || true
}
for which in default all; do
  if [[ $which == all ]]; then out=$(forced --all-features); else out=$(forced); fi
  if [[ -n $out ]]; then
    echo "check-deps: with the $which features gpu-ledger turns on cudarc's ${out% }; the application's cudarc chooses those (Cargo.toml [dependencies])" >&2
    exit 1
  fi
done
if [[ -z $(forced --features cudarc/cuda-13000) ]]; then
  echo "check-deps: the check is broken: it does not see cudarc/cuda-13000 named on the command line" >&2
  exit 1
fi
echo "check-deps: the default features compile none of clap, cpp_demangle, sketches-ddsketch, half, tracing-subscriber, arrow-array, parquet, datafusion, cudarc/cublas, cudarc/nvrtc; feature sql has one arrow ($arrows); no feature turns on a CUDA version or linking mode of cudarc"
