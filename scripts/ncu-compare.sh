#!/usr/bin/env bash
# The bundled kernels' counters from gpu-ledger's Range Profiler and from Nsight Compute, side by
# side with the analytic bytes, on the GPU host:
#   ncu-compare.sh [OUT_DIR]        (beside the ncu_compare binary, e.g. in gpu-bundle/)
# gpu-ledger: auto ranges with kernel replay and the L2 as the previous work left it; then one
# user range per kernel with the L2 flushed before each (`CacheState::Flushed`). Nsight Compute:
# the same metrics, kernel replay, `--clock-control none`, once with `--cache-control none` (the
# cache state of the first) and once with `all` (L2 flushed and invalidated before each kernel,
# the state of the second), and once more with `all` and the two DRAM metrics alone: one pass,
# so no replay restores memory between passes (with several passes ncu's `all` figures carry
# 2 to 3 MB of writes more on every kernel after one that left the L2 dirty). The second table
# compares DRAM bytes of the flushed ranges with that one-pass `all`, and says on how many of the
# kernels whose bytes exceed the L2 the writes agree within 5 %. The last line counts the
# comparisons within 2 %: the first table against `none`, the second against the one-pass `all`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${NCU_COMPARE_BIN:-$here/ncu_compare}
ncu=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
out=${1:-ncu-compare-out}; mkdir -p "$out"
[[ -x $bin ]] || { echo "ncu-compare: no $bin (build the ncu_compare example)" >&2; exit 1; }
[[ -x $ncu ]] || { echo "ncu-compare: no ncu found (set NCU)" >&2; exit 1; }
metrics=$("$bin" --metrics)
"$bin" ledger "$out/ledger.jsonl"
"$bin" flushed "$out/flushed.jsonl"
for cache in none all; do
  "$ncu" --csv --page raw --print-units base --metrics "$metrics" --replay-mode kernel \
    --clock-control none --cache-control "$cache" "$bin" plain > "$out/ncu-$cache.raw" 2> "$out/ncu-$cache.err"
  grep '^"' "$out/ncu-$cache.raw" > "$out/ncu-$cache.csv"
done
"$ncu" --csv --page raw --print-units base --metrics dram__bytes_read.sum,dram__bytes_write.sum \
  --replay-mode kernel --clock-control none --cache-control all "$bin" plain > "$out/ncu-all1.raw" 2> "$out/ncu-all1.err"
grep '^"' "$out/ncu-all1.raw" > "$out/ncu-all1.csv"
python3 - "$out" "$metrics" <<'PY'
import csv, json, sys
out, metrics = sys.argv[1], sys.argv[2].split(",")
ledger = [json.loads(l) for l in open(f"{out}/ledger.jsonl")]
flushed = [json.loads(l) for l in open(f"{out}/flushed.jsonl")]
if len(flushed) != len(ledger):
    sys.exit(f"gpu-ledger measured {len(ledger)} kernels, flushed {len(flushed)}")
def ncu_rows(cache):
    rows = list(csv.DictReader(open(f"{out}/ncu-{cache}.csv")))
    return [r for r in rows if r.get("ID", "").strip().isdigit()]
ncu = {c: ncu_rows(c) for c in ("none", "all", "all1")}
for c, rows in ncu.items():
    if len(rows) != len(ledger):
        sys.exit(f"ncu --cache-control {c} profiled {len(rows)} kernels, gpu-ledger {len(ledger)}")
def num(s):
    return float(s.replace(",", "")) if s not in ("", "n/a") else float("nan")
def rel(a, b):
    return (a - b) / b if b else (0.0 if a == b else float("inf"))
labels = {
    "dram__bytes_read.sum": "DRAM bytes read",
    "dram__bytes_write.sum": "DRAM bytes written",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "global load sectors",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": "global load requests",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": "global store sectors",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": "global store requests",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": "FP32 adds (thread instructions)",
    "gpu__time_duration.sum": "GPU time, ns",
}
short = {m: labels.get(m, m)[:34] for m in metrics}
within = total = 0
print(f"{'kernel':<24} {'metric':<34} {'gpu-ledger':>14} {'ncu none':>14} {'diff':>8} {'ncu all':>14} {'diff':>8} {'analytic':>12}")
for i, l in enumerate(ledger):
    a, b = ncu["none"][i], ncu["all"][i]
    if a["Kernel Name"].split("(")[0] != l["kernel"]:
        sys.exit(f"launch {i}: ncu profiled {a['Kernel Name']}, gpu-ledger {l['kernel']}")
    for m in metrics:
        g, n0, n1 = l["values"].get(m, float("nan")), num(a[m]), num(b[m])
        d0, d1 = rel(g, n0), rel(g, n1)
        total += 1
        within += abs(d0) <= 0.02
        print(f"{l['kernel'][:24]:<24} {short[m]:<34} {g:>14.0f} {n0:>14.0f} {d0:>+8.1%} {n1:>14.0f} {d1:>+8.1%}")
    g = l["values"].get("dram__bytes_read.sum", 0) + l["values"].get("dram__bytes_write.sum", 0)
    n0 = num(a["dram__bytes_read.sum"]) + num(a["dram__bytes_write.sum"])
    n1 = num(b["dram__bytes_read.sum"]) + num(b["dram__bytes_write.sum"])
    an = l["analytic_bytes"]
    # Here each diff is against the analytic bytes, the gpu-ledger one in parentheses.
    print(f"{l['kernel'][:24]:<24} {'DRAM r+w, diff vs analytic':<34} {g:>14.0f} {n0:>14.0f} {rel(n0, an):>+8.1%} {n1:>14.0f} {rel(n1, an):>+8.1%} {an:>12}"
          f"  (gpu-ledger {rel(g, an):+.1%})")
print()
print("With the L2 flushed before each kernel: gpu-ledger CacheState::Flushed against ncu --cache-control all,")
print("the two DRAM metrics alone (one pass); ncu's eight-metric `all` (several passes) beside it")
print(f"{'kernel':<24} {'metric':<20} {'gpu-ledger':>14} {'ncu all 1p':>14} {'diff':>8} {'ncu all':>14} {'diff':>8} {'analytic':>12} {'> L2':>5}")
big = big_ok = large = large_ok = 0
small_off = []
for i, f in enumerate(flushed):
    b, b8 = ncu["all1"][i], ncu["all"][i]
    if b["Kernel Name"].split("(")[0] != f["kernel"]:
        sys.exit(f"launch {i}: ncu profiled {b['Kernel Name']}, gpu-ledger flushed {f['kernel']}")
    exceeds = f["analytic_bytes"] > f["l2_bytes"]
    for m, label in (("dram__bytes_read.sum", "DRAM bytes read"), ("dram__bytes_write.sum", "DRAM bytes written")):
        g, n1, n8 = f["values"].get(m, float("nan")), num(b[m]), num(b8[m])
        d = rel(g, n1)
        total += 1
        within += abs(d) <= 0.02
        if m == "dram__bytes_write.sum" and exceeds:
            big += 1
            big_ok += abs(d) <= 0.05
            if n1 >= 2**20:
                large += 1
                large_ok += abs(d) <= 0.05
            else:
                small_off.append(abs(g - n1))
        print(f"{f['kernel'][:24]:<24} {label:<20} {g:>14.0f} {n1:>14.0f} {d:>+8.1%} {n8:>14.0f} {rel(g, n8):>+8.1%} {f['analytic_bytes']:>12} {'yes' if exceeds else 'no':>5}")
l2 = flushed[0]["l2_bytes"] if flushed else 0
print(f"flushed: DRAM writes within 5 % of ncu's one-pass --cache-control all on {big_ok} of {big} kernels whose bytes exceed the {l2 / 2**20:.0f} MiB L2:"
      f" {large_ok} of the {large} that write 1 MiB or more; the other {big - large} write less, off by at most {max(small_off, default=0) / 1024:.0f} KiB")
print(f"{within} of {total} comparisons agree within 2 % (gpu-ledger against ncu --cache-control none; flushed against one-pass all)")
PY
