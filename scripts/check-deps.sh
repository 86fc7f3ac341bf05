#!/usr/bin/env bash
# An application that depends on gpu-ledger with the default features must compile neither the
# command-line tool's crates (clap), the analysis' (cpp_demangle), the tracing layer's
# (tracing-subscriber) nor the kernel suite's (half, cudarc's cuBLAS and NVRTC bindings). Fails naming what it found. The same check with every
# feature on must find them all, or the check itself is broken.
set -euo pipefail
cd "$(dirname "$0")/.."

# What `cargo tree` shows of the normal dependencies with these feature arguments.
found() {
  local tree cudarc out=()
  tree=$(cargo tree -p gpu-ledger -e normal,features --prefix none "$@")
  cudarc=$(cargo tree -p gpu-ledger -e normal,features --prefix none -i cudarc "$@")
  for crate in clap cpp_demangle half tracing-subscriber; do
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
all=$(found --features cli,kernels,tracing)
if [[ $all != "clap cpp_demangle half tracing-subscriber cudarc/cublas cudarc/nvrtc" ]]; then
  echo "check-deps: the check is broken: with --features cli,kernels,tracing it found '$all'" >&2
  exit 1
fi
echo "check-deps: the default features compile none of clap, cpp_demangle, half, tracing-subscriber, cudarc/cublas, cudarc/nvrtc"
