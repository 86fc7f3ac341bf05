#!/usr/bin/env bash
# Where PC sampling's per-launch cost goes, and duty-cycled sampling on the training loop, in
# one run of about 4 to 6 minutes on the GPU host. Runs from the bundle (scripts/gpu-bundle.sh
# copies it there, beside the binaries and strace/ from scripts/fetch-strace.sh):
#   gpu-bundle/pc-sampling-diagnose.sh [LOG_DIR]
# Everything goes to LOG_DIR/pc-sampling-diagnose.log (default ./gpu-logs), with a line saying
# what each part is; the ledgers of the duty-cycled and continuous runs are summarised into the
# log (and left in LOG_DIR/pc-duty/ with KEEP_LEDGERS=1).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
logs=${1:-gpu-logs}; mkdir -p "$logs"
log="$logs/pc-sampling-diagnose.log"
: > "$log"
status=0
diag="$here/pc_sampling_diagnose"
[[ -x $diag ]] || { echo "no $diag: build the bundle with scripts/gpu-bundle.sh" >&2; exit 2; }
say() { echo "=== $*" | tee -a "$log"; }
run() { timeout "$1" "${@:2}" >> "$log" 2>&1 || { echo "FAILED ($?): ${*:2}" | tee -a "$log"; status=1; }; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$log" 2>&1

say "1. the diagnostics (a)-(e) with CUDA_MODULE_LOADING as the environment has it (${CUDA_MODULE_LOADING:-unset})"
run 120 "$diag" --launches 200 --graph-nodes 50 --fresh 16 --reps 10
say "2. the same with CUDA_MODULE_LOADING=EAGER: (c)'s first launches and (a)'s cost without lazy loading"
run 120 env CUDA_MODULE_LOADING=EAGER "$diag" --launches 200 --graph-nodes 50 --fresh 16 --reps 10

# 3. System calls per launch: strace -f -c around (a) alone, N and 0 launches, sampled and not.
# Each run does 2N launches (N each with a synchronize, N back to back); the difference between
# N and 0 launches removes start-up, enable and disable; sampled minus unsampled is sampling's.
st="$here/strace/usr/bin/strace"
if [[ -x $st ]]; then
  say "3. strace -f -c around (a) alone: ioctl and all system calls per launch, sampled against unsampled"
  lib="$here/strace/usr/lib/x86_64-linux-gnu"
  n=200
  declare -A ioctl total
  for mode in unsampled sampled; do
    for k in 0 $n; do
      out="$logs/strace-$mode-$k.txt"
      # The traced program gets the environment it had: strace -E restores LD_LIBRARY_PATH.
      LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 180 "$st" -f -c -o "$out" \
        -E "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" "$diag" --only plain --$mode --launches $k >> "$log" 2>&1 \
        || { echo "FAILED: strace $mode $k" | tee -a "$log"; status=1; continue; }
      ioctl[$mode-$k]=$(awk '$NF=="ioctl"{print $4}' "$out")
      total[$mode-$k]=$(awk '$NF=="total"{print $4}' "$out")
      echo "strace $mode, $k launches x 2: ioctl ${ioctl[$mode-$k]:-0}, all system calls ${total[$mode-$k]:-0}" >> "$log"
      if [[ $mode == sampled && $k == $n ]]; then
        echo "  the most frequent system calls of the sampled run:" >> "$log"
        sort -k4 -n -r "$out" | awk '$4 ~ /^[0-9]+$/ && $NF != "total"' | head -8 | sed 's/^/    /' >> "$log"
      fi
    done
  done
  awk -v n=$n -v su="${ioctl[sampled-$n]:-0}" -v s0="${ioctl[sampled-0]:-0}" -v uu="${ioctl[unsampled-$n]:-0}" -v u0="${ioctl[unsampled-0]:-0}" \
      -v ts="${total[sampled-$n]:-0}" -v t0="${total[sampled-0]:-0}" -v tu="${total[unsampled-$n]:-0}" -v tu0="${total[unsampled-0]:-0}" 'BEGIN {
    printf "ioctl per launch: unsampled %.2f, sampled %.2f; all system calls per launch: unsampled %.2f, sampled %.2f\n",
      (uu-u0)/(2*n), (su-s0)/(2*n), (tu-tu0)/(2*n), (ts-t0)/(2*n) }' | tee -a "$log"
  rm -f "$logs"/strace-*.txt
else
  say "3. skipped: no strace in the bundle (scripts/fetch-strace.sh, then scripts/gpu-bundle.sh)"
fi

say "4. duty-cycled sampling on the training loop: 3 paired rounds of 2000 iterations, off against a 1 % budget, then a continuous window of 20 iterations"
mkdir -p "$logs/pc-duty"
run 300 "$diag" --duty --rounds 3 --iters 2000 --budget 0.01 --window 20 --keep "$logs/pc-duty"
for l in duty window; do
  f="$logs/pc-duty/$l.jsonl"
  [[ -f $f ]] || continue
  say "   gpu-ledger summary of the $l run's ledger (the trailer's profile: 'PC sampling over the run')"
  run 60 "$here/gpu-ledger" check "$f"
  timeout 60 "$here/gpu-ledger" summary "$f" --warmup none --include-incomplete 2>&1 \
    | sed -n '/^### PC sampling over the run/,/^### /p' >> "$log"
done
# The summaries are in the log; the ledgers stay behind only when asked (a lent machine returns
# few files).
[[ ${KEEP_LEDGERS:-0} == 1 ]] || rm -rf "$logs/pc-duty"

say "5. the PC sampling GPU tests (the duty-cycled profiled run among them)"
run 180 "$here/gpu-tests" --ignored --test-threads=1 --nocapture pc_sampling::
grep -hE "^test result|FAILED|panicked" "$log" | head -20
exit $status
