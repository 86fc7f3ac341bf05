#!/usr/bin/env bash
# Builds every GPU test binary and example in release mode into gpu-bundle/ (ignored by git),
# stripped, with a runner, so that a GPU host without Rust runs everything with one command:
#   gpu-bundle/run.sh [LOG_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=gpu-bundle
rm -rf "$out" && mkdir -p "$out"
# The executables cargo built for `cargo ARGS...`, one "KIND NAME PATH" line each: its own list,
# so that nothing stale in target/ (binaries of removed examples) is picked up.
artifacts() {
  cargo "$@" --message-format=json-render-diagnostics | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable"):
        print(m["target"]["kind"][0], m["target"]["name"], m["executable"])'
}
artifacts build --release --examples | while read -r kind name exe; do
  cp "$exe" "$out/$name"
done
# The command line, which the runner uses to check and summarise the examples' ledgers.
artifacts build --release -p gpu-ledger-cli --bins | while read -r kind name exe; do
  cp "$exe" "$out/$name"
done
artifacts test --release --test gpu --no-run | while read -r kind name exe; do
  if [[ $kind == test && $name == gpu ]]; then cp "$exe" "$out/gpu-tests"; fi
done
# The CPU-side benchmarks, so that their figures can be read on the GPU host as well.
artifacts bench --no-run | while read -r kind name exe; do
  if [[ $kind == bench ]]; then cp "$exe" "$out/bench-$name"; fi
done
[[ -x $out/gpu-tests && -x $out/demo ]] || { echo "gpu-bundle: the build produced no gpu-tests or demo" >&2; exit 1; }
strip "$out"/* 2>/dev/null || true
# The comparison with Nsight Compute runs beside the ncu_compare example.
cp scripts/ncu-compare.sh "$out/ncu-compare.sh"
cp scripts/pc-sampling-ncu.sh "$out/pc-sampling-ncu.sh"
# Where PC sampling's cost goes, with strace for hosts that have none (scripts/fetch-strace.sh).
cp scripts/pc-sampling-diagnose.sh "$out/pc-sampling-diagnose.sh"
if [[ -x gpu-tools/strace/usr/bin/strace ]]; then
  cp -r gpu-tools/strace "$out/strace"
else
  echo "gpu-bundle: no gpu-tools/strace (run scripts/fetch-strace.sh): pc-sampling-diagnose.sh will skip strace" >&2
fi
# The metrics example against Prometheus (or direct scrapes where there is none), beside the
# example and the command line.
cp scripts/prometheus-check.sh scripts/prometheus_compare.py "$out/"
# An earlier tree's overhead binary, for run.sh compare (OLD_OVERHEAD=path).
if [[ -n ${OLD_OVERHEAD:-} ]]; then mkdir -p "$out/old" && cp "$OLD_OVERHEAD" "$out/old/overhead"; fi
[[ -x $out/metrics_prometheus ]] || { echo "gpu-bundle: the build produced no metrics_prometheus example" >&2; exit 1; }
cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs every GPU test, the examples and the overhead benchmark. Logs go to $1 (default
# ./gpu-logs), at most a few files so that they come back from a lent machine.
# Usage: run.sh [LOG_DIR] [MODE]
#   all (default)  everything below, in this order
#   quick          the GPU tests and the demo
#   suite          the GPU tests, the demo, the examples and the training loop (about 3 minutes)
#   overhead       the benchmarks' summaries on this host, `overhead --decompose`,
#                  `overhead --sustained 60` and the probes (--nvml-interference, --scope-on)
#                  (about 7 minutes), on a quiet machine
#   metrics        the metrics example at the timeline level, one iteration in 100 traced, 1 000
#                  iterations, compared with its ledger through Prometheus when there is one
#                  (installed if it can be), else through direct scrapes (not part of all)
#   verify         one call for a change's whole check (about 6 minutes): the GPU tests, the
#                  demo, the examples (idle causes and graph scopes among them) and the metrics
#                  run, in five logs (not part of all)
#   compare        the overhead table of this build alternated with the binary in old/ (a build
#                  of an earlier tree, if there is one), the timeline with and without idle
#                  causes alternated, and ncu-compare.sh's last line (about 7 minutes; not part
#                  of all)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
logs=${1:-gpu-logs}; mkdir -p "$logs"
mode=${2:-all}
case $mode in all|quick|suite|overhead|metrics|verify|compare) ;; *) echo "run.sh: unknown mode '$mode' (all, quick, suite, overhead, metrics, verify, compare)" >&2; exit 2;; esac
status=0
nvidia-smi > "$logs/nvidia-smi.txt" 2>&1 || true
if [[ $mode == compare ]]; then
  # Workloads (a) and (c), each binary's table twice, alternated, so that the host's drift
  # between calls falls on both alike.
  args=(--configs none,raw-cupti,scopes,timeline --workloads a,c --rounds "${ROUNDS:-6}")
  for lap in 1 2; do
    for which in old new; do
      bin=$here/overhead; [[ $which == old ]] && bin=$here/old/overhead
      [[ -x $bin ]] || { echo "=== $which: no $bin" >> "$logs/overhead-alternated.log"; continue; }
      echo "=== lap $lap: $which ($bin ${args[*]})" >> "$logs/overhead-alternated.log"
      timeout 150 "$bin" "${args[@]}" >> "$logs/overhead-alternated.log" 2>&1 || { echo "overhead $which failed: $?" >> "$logs/overhead-alternated.log"; status=1; }
    done
  done
  # Idle causes on and off: the configurations rotate within each round.
  timeout 200 "$here/overhead" --configs none,raw-cupti,timeline,tl-nocauses --workloads a,c --rounds "${IDLE_ROUNDS:-12}" > "$logs/overhead-idle.log" 2>&1 || status=1
  # NCU=0 leaves Nsight Compute's comparison out (a few minutes).
  if [[ ${NCU:-1} == 1 ]]; then
    (cd "$here" && timeout 240 ./ncu-compare.sh "${TMPDIR:-/tmp}/ncu-compare") > "$logs/ncu-compare.log" 2>&1 || status=1
    tail -n 1 "$logs/ncu-compare.log"
  fi
  exit $status
fi
if [[ $mode == verify ]]; then
  timeout 330 "$here/gpu-tests" --ignored --test-threads=1 --nocapture --skip multi_gpu:: > "$logs/gpu-tests.log" 2>&1 || { echo "gpu-tests exit $?" >> "$logs/gpu-tests.log"; status=1; }
  "$here/demo" 20 /tmp/demo-ledger.jsonl > "$logs/demo.log" 2>&1 || status=1
  ex() {
    echo "=== $*" >> "$logs/examples.log"
    timeout 120 "$here/$1" "${@:2}" >> "$logs/examples.log" 2>&1 || { echo "$* failed: $?" >> "$logs/examples.log"; status=1; }
  }
  for e in ex1_vector_add ex2_transpose ex3_reduction ex4_gemm ex5_softmax ex6_attention ex7_spill; do
    ex "$e" "/tmp/$e.jsonl"
  done
  ex training_loop --iters 20
  ex training_loop --iters 20 --graph
  ex idle_causes --iters 20 --ledger /tmp/idle.jsonl
  ex gpu-ledger summary /tmp/idle.jsonl
  ex graph_scopes
  ex graph_scopes --pre-start --sample-every 0
  # The GPU host reaches no package registry: direct scrapes of /metrics unless a Prometheus is
  # on PATH there.
  prom=skip; command -v prometheus >/dev/null && command -v promtool >/dev/null && prom=require
  (cd "${TMPDIR:-/tmp}" && LEVEL=timeline SAMPLE_EVERY=100 ITERATIONS=1000 PROMETHEUS=$prom \
    EXAMPLE="$here/metrics_prometheus" CLI="$here/gpu-ledger" \
    timeout 240 "$here/prometheus-check.sh") > "$logs/metrics.log" 2>&1 || status=1
  grep -hE "^test result|FAILED|panicked|failed:" "$logs"/gpu-tests.log "$logs"/examples.log | head -40
  tail -n 2 "$logs/metrics.log"
  exit $status
fi
if [[ $mode == metrics ]]; then
  # The work directory (Prometheus' database, the ledger) outside $logs, kept only on failure.
  (cd "${TMPDIR:-/tmp}" && LEVEL=timeline SAMPLE_EVERY=100 ITERATIONS=1000 PROMETHEUS=auto \
    EXAMPLE="$here/metrics_prometheus" CLI="$here/gpu-ledger" \
    timeout 600 "$here/prometheus-check.sh") > "$logs/metrics.log" 2>&1 || status=1
  tail -n 3 "$logs/metrics.log"
  exit $status
fi
if [[ $mode != overhead ]]; then
  skip_multi=()
  (( $(nvidia-smi -L 2>/dev/null | grep -c '^GPU ') < 2 )) && skip_multi=(--skip multi_gpu::) && echo "one GPU: multi_gpu:: tests not run" >> "$logs/gpu-tests.log"
  "$here/gpu-tests" --ignored --test-threads=1 --nocapture "${skip_multi[@]}" >> "$logs/gpu-tests.log" 2>&1 || status=1
  # The demo's ledger stays out of $logs: a lent machine returns at most 8 files, and `all`
  # writes exactly 8 logs (nvidia-smi, gpu-tests, demo, examples, bench, overhead, sustained,
  # probes).
  "$here/demo" 20 /tmp/demo-ledger.jsonl > "$logs/demo.log" 2>&1 || status=1
fi
if [[ $mode == all || $mode == suite ]]; then
  for ex in ex1_vector_add ex2_transpose ex3_reduction ex4_gemm ex5_softmax ex6_attention ex7_spill; do
    [[ -x $here/$ex ]] || continue
    echo "=== $ex" >> "$logs/examples.log"
    timeout 120 "$here/$ex" "/tmp/$ex.jsonl" >> "$logs/examples.log" 2>&1 || { echo "$ex failed: $?" >> "$logs/examples.log"; status=1; }
  done
  if [[ -x $here/training_loop ]]; then
    for args in "" "--graph" "--recompute"; do
      echo "=== training_loop $args" >> "$logs/examples.log"
      timeout 120 "$here/training_loop" --iters 20 $args >> "$logs/examples.log" 2>&1 || { echo "training_loop $args failed" >> "$logs/examples.log"; status=1; }
      for l in target/gpu-ledger-training*.jsonl; do
        [[ -f $l ]] && { "$here/gpu-ledger" check "$l"; "$here/gpu-ledger" summary "$l" --warmup none --include-incomplete; } >> "$logs/examples.log" 2>&1
      done
    done
  fi
  if [[ -x $here/graph_scopes ]]; then
    for args in "" "--pre-start --sample-every 0"; do
      echo "=== graph_scopes $args" >> "$logs/examples.log"
      timeout 120 "$here/graph_scopes" $args >> "$logs/examples.log" 2>&1 || { echo "graph_scopes $args failed" >> "$logs/examples.log"; status=1; }
    done
  fi
fi
if [[ $mode == all || $mode == overhead ]]; then
  # The CPU benchmarks' summaries on this host (scope and step() costs, decode rates). The
  # filter matches no criterion benchmark, so only the summary with its verdicts runs.
  for b in scope_overhead decode; do
    [[ -x $here/bench-$b ]] && { echo "=== bench-$b"; timeout 300 "$here/bench-$b" --bench --quick summary-only 2>&1 || status=1; } >> "$logs/bench.log"
  done
  # --decompose: the timeline ablations as well (about 3 minutes).
  [[ -x $here/overhead ]] && { timeout 420 "$here/overhead" --decompose > "$logs/overhead.log" 2>&1 || status=1; }
  [[ -x $here/overhead ]] && { timeout 120 "$here/overhead" --sustained 60 > "$logs/sustained.log" 2>&1 || status=1; }
  # The probes, into one log (about a minute): which NVML read slows the GPU work; a scope timed
  # on a stream against the application's own event pair.
  if [[ -x $here/overhead ]]; then
    for probe in "--nvml-interference --rounds 6" "--scope-on --rounds 20 --launches 20000"; do
      echo "=== overhead $probe" >> "$logs/probes.log"
      timeout 150 "$here/overhead" $probe >> "$logs/probes.log" 2>&1 || { echo "overhead $probe failed: $?" >> "$logs/probes.log"; status=1; }
    done
  fi
fi
grep -hE "^test result|FAILED|panicked|Segmentation|SIGSEGV" "$logs"/gpu-tests.log 2>/dev/null | head -40
exit $status
RUN
chmod +x "$out/run.sh"
du -sh "$out"; ls -la "$out"
