#!/usr/bin/env bash
# Regenerates src/bindings.rs, src/records_13_5.rs and src/release_cbids.rs
# byte-for-byte from pinned wheels:
# - the CUPTI 13.0 headers (and the NVTX 13.0 headers that CUPTI's NVTX callback parameters use):
#   the API, the callback data, and the activity records up to 13.0's;
# - the CUPTI 13.5 headers: the record versions later releases emit (kernel 11 to 13, memcpy 7,
#   memset 5), which 13.0's headers do not define;
# - every supported release's callback-id headers: ids are stable, names and the count change.
# Needs: python3 with pip (to fetch the wheels), libclang (apt-get install libclang-dev), cargo.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fetch() { # DIR PACKAGE==VERSION...
  local dir=$1; shift
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$work/wheels-$dir" "$@"
  mkdir -p "$work/$dir"
  for w in "$work/wheels-$dir"/*.whl; do python3 -m zipfile -e "$w" "$work/$dir"; done
  rm -rf "$work/wheels-$dir"
}
fetch base nvidia-cuda-cupti==13.0.85 nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88 \
  nvidia-nvtx==13.0.85
include="$work/base/nvidia/cu13/include"
grep -q '#define CUPTI_API_VERSION 130001' "$include/cupti_version.h" \
  || { echo "regenerate.sh: unexpected CUPTI_API_VERSION in the pinned wheel" >&2; exit 1; }
# The supported release lines, oldest first: the first of each line's layouts and callback ids.
releases=(12.6.80 12.8.90 12.9.79 13.0.85 13.1.115 13.2.86 13.3.75 13.4.92 13.5.25)
release_args=()
for v in "${releases[@]}"; do
  if [[ $v == 13.5.25 ]]; then
    # The newest release's record structs are bound too: with its own cuda.h.
    fetch "r$v" "nvidia-cuda-cupti==$v" nvidia-cuda-runtime==13.5.37 nvidia-cuda-crt==13.5.37
    release_args+=("$v=$work/r$v/nvidia/cu13/include")
  elif [[ $v == 12.* ]]; then
    fetch "r$v" "nvidia-cuda-cupti-cu12==$v"
    release_args+=("$v=$work/r$v/nvidia/cuda_cupti/include")
  else
    fetch "r$v" "nvidia-cuda-cupti==$v"
    release_args+=("$v=$work/r$v/nvidia/cu13/include")
  fi
done
newest="$work/r13.5.25/nvidia/cu13/include"
cargo run --quiet --release --locked --manifest-path "$here/generator/Cargo.toml" -- \
  "$include" "$here" "$newest" "${release_args[@]}"
echo "regenerated $here/src/bindings.rs, records_13_5.rs and release_cbids.rs"
