#!/usr/bin/env bash
# What each crate may compile, checked from `cargo tree` (and one real build of the CLI):
# - the ledger format (gpu-ledger-format) depends on serde, serde_json, serde_path_to_error and
#   thiserror alone, and on no crate outside the list below (what those four bring today);
# - the metrics mapping (gpu-ledger-metrics) depends on the format and the `metrics` facade alone;
# - the tools, the metrics mapping and the command line (gpu-ledger-tools, gpu-ledger-metrics,
#   gpu-ledger-cli) never compile the profiler, cudarc, CUPTI's bindings or NVML, with any
#   feature; a build of the CLI compiles no cudarc;
# - an application that depends on the profiler with the default features compiles none of the
#   analysis', the CLI's, the tracing layer's, the metrics', the Parquet writer's, the SQL
#   engine's or the kernel suite's crates (the same check with every feature on must find them
#   all, or the check is broken); no feature compiles a metrics exporter (the application's);
# - no feature of the profiler turns on a CUDA version or a linking mode of cudarc (the
#   application's cudarc chooses them), and feature sql holds one arrow.
# Fails naming what it found.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() {
  echo "check-deps: $*" >&2
  exit 1
}

# The crates (names only) of a package's normal dependency tree, one per line.
crates() {
  cargo tree -e normal --prefix none "$@" | sed -E 's/ v[0-9].*//' | sort -u
}

# The format: its direct dependencies, and everything it compiles.
direct=$(cargo tree -p gpu-ledger-format -e normal --depth 1 --prefix none | sed -E 's/ v[0-9].*//' | grep -v '^gpu-ledger-format$' | sort -u | tr '\n' ' ')
[[ $direct == "serde serde_json serde_path_to_error thiserror " ]] ||
  fail "gpu-ledger-format depends directly on '$direct'; the format may depend on serde, serde_json, serde_path_to_error and thiserror only (gpu-ledger-format/Cargo.toml)"
allowed="gpu-ledger-format itoa memchr proc-macro2 quote serde serde_core serde_derive serde_json serde_path_to_error syn thiserror thiserror-impl unicode-ident zmij"
for c in $(crates -p gpu-ledger-format); do
  [[ " $allowed " == *" $c "* ]] ||
    fail "gpu-ledger-format now compiles $c ($(cargo tree -p gpu-ledger-format -e normal -i "$c" --prefix none | tail -n +2 | head -1 | sed -E 's/ v[0-9].*//') brings it): keep the format's tree to serde-class crates, or add $c to this list with the reason"
done

# The metrics mapping: the format's crates, the facade and its hash (rapidhash, with the
# rustversion macro it builds with), and the publisher's hash map (rustc-hash, the profiler's too).
allowed_metrics="$allowed gpu-ledger-metrics metrics rapidhash rustversion rustc-hash"
for c in $(crates -p gpu-ledger-metrics); do
  [[ " $allowed_metrics " == *" $c "* ]] ||
    fail "gpu-ledger-metrics now compiles $c: every application with feature metrics compiles it; keep the mapping to the format and the metrics facade, or add $c to this list with the reason"
done

# The tools, the metrics mapping and the CLI, with every feature: no profiler, no CUDA.
for pkg in gpu-ledger-tools gpu-ledger-metrics gpu-ledger-cli; do
  tree=$(crates -p "$pkg" --all-features -e build)
  for c in gpu-ledger cudarc cupti-sys nvml-wrapper nvtx; do
    grep -qx "$c" <<<"$tree" && fail "$pkg compiles $c: the tools read ledgers and must never depend on the profiler or CUDA"
  done
done
# One real build, as `cargo install --path gpu-ledger-cli` makes it: no cudarc compiled.
# Cargo's progress goes to a log, not /dev/null: where the CI sandbox has /dev/null as a regular
# file, text written there is read back by the next cargo's rustc probe and fails it.
mkdir -p target
build_log=target/check-deps-cli-build.log
json=$(cargo build -p gpu-ledger-cli --message-format=json 2>"$build_log") ||
  { tail -n 30 "$build_log" >&2; fail "cargo build -p gpu-ledger-cli failed (its log above, in full in $build_log)"; }
compiled=$(python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact": print(m["target"]["name"])' <<<"$json" | sort -u)
grep -qx gpu-ledger <<<"$compiled" || fail "the build of gpu-ledger-cli made no gpu-ledger binary: the check is broken"
grep -qx cudarc <<<"$compiled" && fail "a build of gpu-ledger-cli compiled cudarc"

# The profiler's default features against every feature.
found() {
  local tree cudarc out=()
  tree=$(crates -p gpu-ledger -e normal "$@")
  cudarc=$(cargo tree -p gpu-ledger -e normal,features --prefix none -i cudarc "$@")
  for crate in clap cpp_demangle sketches-ddsketch half tracing-subscriber arrow-array parquet datafusion gpu-ledger-tools gpu-ledger-metrics metrics metrics-exporter-prometheus; do
    grep -qx "$crate" <<<"$tree" && out+=("$crate")
  done
  for feature in cublas nvrtc; do
    grep -q "^cudarc feature \"$feature\"" <<<"$cudarc" && out+=("cudarc/$feature")
  done
  echo "${out[*]:-}"
}
default=$(found)
[[ -z $default ]] || fail "with the default features gpu-ledger compiles $default; put it behind the feature that needs it (Cargo.toml [features])"
all=$(found --features kernels,tracing,metrics)
[[ $all == "cpp_demangle sketches-ddsketch half tracing-subscriber gpu-ledger-tools gpu-ledger-metrics metrics cudarc/cublas cudarc/nvrtc" ]] ||
  fail "the check is broken: with --features kernels,tracing,metrics it found '$all'"
# The exporter (HTTP server, runtime) is the application's choice: no feature brings one.
exporters=$(crates -p gpu-ledger -e normal --all-features | grep -xE 'metrics-exporter-[a-z-]+|hyper|tokio' | tr '\n' ' ' || true)
[[ -z $exporters ]] || fail "a feature of gpu-ledger compiles $exporters: the metrics exporter is the application's, which installs it"
[[ -z $(crates -p gpu-ledger -e normal | grep -xE 'clap|datafusion|parquet|arrow-array') ]] || fail "the profiler compiles the CLI's crates"

# The writer and DataFusion read and write with one arrow: two versions would compile twice and
# could not pass arrays between them.
arrows=$(cargo tree -p gpu-ledger-cli -e normal --prefix none --features sql | grep -E '^arrow-array v' | sed -E 's/ \(\*\)$//' | sort -u)
[[ $(wc -l <<<"$arrows") == 1 ]] ||
  fail "with feature sql the tree holds several arrow versions: $(tr '\n' ' ' <<<"$arrows"); align the parquet and arrow-* versions in gpu-ledger-tools/Cargo.toml with DataFusion's"

# cudarc's CUDA version and linking mode are the application's: any that gpu-ledger's normal
# dependencies turned on would be unified into the application's cudarc.
forced() {
  cargo tree -p gpu-ledger -e normal,features --prefix none -i cudarc "$@" |
    grep -oE '^cudarc feature "(cuda-[0-9]+|cuda-version-from-build-system|fallback-latest|(fallback-)?dynamic-loading|dynamic-linking|static-linking|default)"' |
    sed 's/^cudarc feature //' | tr '\n' ' ' || true
}
for which in default all; do
  if [[ $which == all ]]; then out=$(forced --all-features); else out=$(forced); fi
  [[ -z $out ]] || fail "with the $which features gpu-ledger turns on cudarc's ${out% }; the application's cudarc chooses those (Cargo.toml [dependencies])"
done
[[ -n $(forced --features cudarc/cuda-13000) ]] || fail "the check is broken: it does not see cudarc/cuda-13000 named on the command line"
echo "check-deps: the format compiles serde-class crates only; the metrics mapping the format and the metrics facade only; the tools, the metrics mapping and the CLI compile no profiler and no cudarc (a build of the CLI compiled none); the profiler's default features compile none of the analysis', CLI's, tracing layer's, metrics' or kernel suite's crates, and no feature compiles a metrics exporter; feature sql has one arrow ($arrows); no feature turns on a CUDA version or linking mode of cudarc"
