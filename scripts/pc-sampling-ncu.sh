#!/usr/bin/env bash
# Compares gpu-ledger's PC sampling with Nsight Compute on the same kernels, on a GPU host:
# the stall-reason distribution of each kernel of the `pc_sampling` example against ncu's warp
# state statistics (WarpStateStats: every warp's state, counted each cycle) and, where ncu
# reports them, its own warp state samples (SourceCounters), side by side, with the
# total-variation distance. The last line says how many kernels agree within 0.15. ncu leaves
# the caches as the work left them (--cache-control none) and the comparison takes each kernel's
# second launch, so that both sides see warm caches.
# Usage: pc-sampling-ncu.sh [DIR_WITH_pc_sampling] [WORK_DIR]
set -euo pipefail
bin=${1:-$(dirname "$0")}
work=${2:-/tmp/pc-sampling-ncu}
mkdir -p "$work"
ncu=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/cuda/extras/CUPTI/lib64
"$bin/pc_sampling" --json "$work/ledger.json" > "$work/ledger.log"
kernels='regex:^(pointer_chase|fma_chain|transpose_tiled|transpose_padded|spill_dynamic_index|spill_free|reduce_tree_partials|reduce_shuffle_partials)$'
"$ncu" --clock-control none --cache-control none --section WarpStateStats --section SourceCounters -k "$kernels" \
  --page raw --csv "$bin/pc_sampling" --launch-only > "$work/ncu.csv" 2> "$work/ncu.err"
python3 - "$work/ledger.json" "$work/ncu.csv" <<'PY'
import csv, json, re, sys
ours = json.load(open(sys.argv[1]))
lines = open(sys.argv[2]).read().splitlines()
start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))
rows = list(csv.reader(lines[start:]))
head, body = rows[0], [r for r in rows[2:] if len(r) == len(rows[0])]
wss = re.compile(r'^smsp__average_warps_issue_stalled_(.+)_per_issue_active\.ratio$')
pcs = re.compile(r'^smsp__pcsamp_warps_issue_stalled_(.+)$')
def num(s):
    try: return float(s.replace(',', ''))
    except ValueError: return None
def tv(a, b):
    sa, sb = sum(a.values()), sum(b.values())
    if sa <= 0 or sb <= 0: return 1.0
    return sum(abs(a.get(k, 0) / sa - b.get(k, 0) / sb) for k in set(a) | set(b)) / 2
name_col = head.index('Kernel Name')
last = {}
for r in body:
    last[r[name_col].split('(')[0]] = r
agree = total = 0
for k, r in last.items():
    if k not in ours: continue
    mine = {key: float(v) for key, v in ours[k]['by_reason'].items()}
    # ncu spells one reason in the singular where CUPTI's PC sampling has the plural.
    norm = lambda key: 'no_instructions' if key == 'no_instruction' else key
    w = {norm(m.group(1)): num(r[i]) for i, h in enumerate(head) if (m := wss.match(h)) and not m.group(1).endswith('_not_issued') and num(r[i]) is not None}
    s = {norm(m.group(1)): num(r[i]) for i, h in enumerate(head) if (m := pcs.match(h)) and not m.group(1).endswith('_not_issued') and num(r[i]) is not None}
    d = tv(mine, w)
    total += 1; agree += d <= 0.15
    line = f"{k:<26} TV vs WarpStateStats {d:.3f}"
    # ncu's own two collections of the one launch, side by side: where they differ as much as
    # gpu-ledger does, the kernel is too short for one launch to settle the distribution.
    if s: line += f", vs ncu's samples {tv(mine, s):.3f} (ncu's samples vs its WarpStateStats {tv(s, w):.3f})"
    print(line)
    sm, sw, ss = sum(mine.values()) or 1, sum(w.values()) or 1, sum(s.values()) or 1
    for key in sorted(set(mine) | set(w), key=lambda x: -(mine.get(x, 0) / sm + w.get(x, 0) / sw))[:6]:
        extra = f"  ncu samples {100 * s.get(key, 0) / ss:5.1f} %" if s else ""
        print(f"    {key:<22} gpu-ledger {100 * mine.get(key, 0) / sm:5.1f} %  WarpStateStats {100 * w.get(key, 0) / sw:5.1f} %{extra}")
print(f"{agree} of {total} kernels agree with WarpStateStats within 0.15 (total variation)")
PY
