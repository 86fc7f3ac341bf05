#!/usr/bin/env bash
# Runs the CPU tests that decode raw CUPTI records and handle raw buffers (the unit tests of
# src/cupti/) under valgrind's memcheck: memory safety at the FFI edge (Miri needs a nightly
# toolchain we do not have).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "memcheck.sh: valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
cargo test --lib --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["kind"]==["lib"] and m["profile"]["test"]: print(m["executable"])' | tail -1 \
  | xargs -I{} valgrind --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite -q {} cupti:: --test-threads=1
echo "memcheck: no errors"
