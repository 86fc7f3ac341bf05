#!/usr/bin/env bash
# Builds every GPU test binary and example in release mode into gpu-bundle/ (ignored by git),
# stripped, with a runner, so that a GPU host without Rust runs everything with one command:
#   gpu-bundle/run.sh [LOG_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=gpu-bundle
rm -rf "$out" && mkdir -p "$out"
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
cargo build --release --examples
test_bin=$(cargo test --release --test gpu --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]=="gpu": print(m["executable"])')
cp "$test_bin" "$out/gpu-tests"
for ex in "$target"/release/examples/*; do
  name=$(basename "$ex"); [[ -f "$ex" && -x "$ex" && "$name" != *-* ]] && cp "$ex" "$out/"
done
strip "$out"/* 2>/dev/null || true
cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs every GPU test, then the demo. Logs go to $1 (default: ./gpu-logs).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
logs=${1:-gpu-logs}; mkdir -p "$logs"
status=0
nvidia-smi > "$logs/nvidia-smi.txt" 2>&1 || true
"$here/gpu-tests" --ignored --test-threads=1 --nocapture 2>&1 | tee "$logs/gpu-tests.log" || status=1
"$here/demo" 20 "$logs/demo-ledger.jsonl" 2>&1 | tee "$logs/demo.log" || status=1
exit $status
RUN
chmod +x "$out/run.sh"
du -sh "$out"; ls -la "$out"
