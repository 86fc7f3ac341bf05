#!/usr/bin/env bash
# The GPU tests and the demo once per CUPTI release, each library named by GPU_LEDGER_CUPTI_PATH.
#   scripts/cupti-matrix.sh prepare   (on the build machine, after scripts/gpu-bundle.sh): puts
#       the pinned wheels' CUPTI libraries into gpu-bundle/cupti/ as compressed archives (the
#       counters level needs the wheel's libnvperf_host.so beside libcupti);
#   gpu-bundle/cupti-matrix.sh LOG_DIR (on the GPU host): for the toolkit's CUPTI and each
#       archive, the GPU tests and the demo, one log per release and a summary on stdout. A
#       release the bindings do not cover (12.5) must be refused in one line, and run
#       unprofiled with --fail-open.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [[ ${1:-} == prepare ]]; then
  set -e
  root=$(cd "$here/.." && pwd)
  [[ -x $root/gpu-bundle/gpu-tests ]] || { echo "cupti-matrix: run scripts/gpu-bundle.sh first" >&2; exit 1; }
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  mkdir -p "$root/gpu-bundle/cupti"
  for spec in nvidia-cuda-cupti-cu12==12.9.79 nvidia-cuda-cupti==13.4.92 nvidia-cuda-cupti-cu12==12.5.82; do
    ver=${spec#*==}
    python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$work/w$ver" "$spec"
    python3 -m zipfile -e "$work/w$ver"/*.whl "$work/u$ver"
    lib=$(dirname "$(find "$work/u$ver" -name 'libcupti.so.1*' | head -1)")
    # The covered releases carry what the counters level loads; 12.5 only needs to be refused.
    files=(libcupti.so.1* libnvperf_host.so libnvperf_target.so)
    [[ $ver == 12.5.* ]] && files=(libcupti.so.1*)
    (cd "$lib" && tar -cf - ${files[@]}) | xz -6 -T2 > "$root/gpu-bundle/cupti/cupti-$ver.tar.xz"
  done
  cp "$here/cupti-matrix.sh" "$root/gpu-bundle/cupti-matrix.sh"
  du -sh "$root/gpu-bundle/cupti"
  exit 0
fi
logs=${1:?usage: cupti-matrix.sh LOG_DIR}
mkdir -p "$logs"
status=0
# One release: the GPU tests and the demo with GPU_LEDGER_CUPTI_PATH=$2 (empty: the search).
run_release() {
  local name=$1 lib=$2 log="$logs/cupti-$1.log"
  local env=(env -u GPU_LEDGER_LEVEL -u NVTX_INJECTION64_PATH)
  [[ -n $lib ]] && env+=("GPU_LEDGER_CUPTI_PATH=$lib" "LD_LIBRARY_PATH=$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  (( $(nvidia-smi -L 2>/dev/null | grep -c '^GPU ') < 2 )) && skip=(--skip multi_gpu::) || skip=()
  "${env[@]}" timeout 150 "$here/gpu-tests" --ignored --test-threads=1 --nocapture "${skip[@]}" > "$log" 2>&1
  local tests=$?
  "${env[@]}" timeout 60 "$here/demo" 20 "/tmp/matrix-$name.jsonl" >> "$log" 2>&1
  local demo=$?
  local result header
  result=$(grep -E '^test result' "$log" | tail -1)
  header=$(head -1 "/tmp/matrix-$name.jsonl" 2>/dev/null | python3 -c 'import json,sys
e=json.loads(sys.stdin.read())["environment"]
print("CUPTI", e.get("cupti_release"), "(API", e.get("cupti_api_version"), ") at", e.get("cupti_path"), "| features:", "; ".join(e.get("cupti_features", [])))' 2>&1)
  echo "CUPTI $name: gpu-tests $([[ $tests == 0 ]] && echo ok || echo FAILED) (${result#test result: }), demo $([[ $demo == 0 ]] && echo ok || echo "FAILED ($demo)"); header: $header"
  grep -E '^test .* FAILED$|panicked at' "$log" | head -20 | sed 's/^/    /'
  [[ $tests == 0 && $demo == 0 ]] || status=1
}
run_release 13.0-toolkit ""
for a in "$here"/cupti/cupti-*.tar.xz; do
  ver=$(basename "$a" .tar.xz); ver=${ver#cupti-}
  dir=/tmp/cupti-$ver; rm -rf "$dir"; mkdir -p "$dir"; xz -dc "$a" | tar -C "$dir" -xf -
  lib=$(ls "$dir"/libcupti.so.1* | head -1)
  if [[ $ver == 12.5.* ]]; then
    out=$(env -u GPU_LEDGER_LEVEL GPU_LEDGER_CUPTI_PATH="$lib" timeout 60 "$here/demo" 3 /tmp/matrix-12.5.jsonl 2>&1); rc=$?
    lines=$(printf '%s\n' "$out" | grep -c .)
    open=$(env -u GPU_LEDGER_LEVEL GPU_LEDGER_CUPTI_PATH="$lib" timeout 60 "$here/demo" 3 /tmp/matrix-12.5-open.jsonl --fail-open 2>&1); orc=$?
    why=$(head -1 /tmp/matrix-12.5-open.jsonl 2>/dev/null | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["warnings"])' 2>&1)
    verdict=$([[ $rc != 0 && $lines == 1 && $orc == 0 ]] && echo ok || echo FAILED)
    echo "CUPTI $ver (uncovered): $verdict: demo exit $rc, $lines line(s): $out | --fail-open exit $orc, header warnings: $why"
    [[ $verdict == ok ]] || status=1
  else
    run_release "$ver" "$lib"
  fi
done
exit $status
