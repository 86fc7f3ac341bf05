#!/usr/bin/env bash
# Regenerates src/bindings.rs and src/cbids.rs byte-for-byte from the pinned CUPTI 13.0 headers
# (and the NVTX 13.0 headers that CUPTI's NVTX callback parameters use).
# Needs: python3 with pip (to fetch the wheels), libclang (apt-get install libclang-dev), cargo.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$work/wheels" \
  nvidia-cuda-cupti==13.0.85 nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88 \
  nvidia-nvtx==13.0.85
mkdir -p "$work/unpacked"
for w in "$work"/wheels/*.whl; do
  python3 -m zipfile -e "$w" "$work/unpacked"
done
include="$work/unpacked/nvidia/cu13/include"
grep -q '#define CUPTI_API_VERSION 130001' "$include/cupti_version.h" \
  || { echo "regenerate.sh: unexpected CUPTI_API_VERSION in the pinned wheel" >&2; exit 1; }
cargo run --quiet --release --locked --manifest-path "$here/generator/Cargo.toml" -- "$include" "$here"
echo "regenerated $here/src/bindings.rs and $here/src/cbids.rs"
