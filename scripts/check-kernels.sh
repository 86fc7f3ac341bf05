#!/usr/bin/env bash
# Compile-checks every kernels/*.cu with NVRTC 13.0 for sm_90 with -lineinfo, without a GPU:
# NVRTC (and the ptxas it runs for a real sm_XY target) needs only libnvrtc.so.13.
#
#   scripts/check-kernels.sh [ARCH]        (ARCH defaults to sm_90)
#
# libnvrtc.so.13 is taken from $NVRTC_LIB_DIR, else from an installed `nvidia-cuda-nvrtc` wheel,
# else the 13.0 wheel is downloaded (pip download, no install) and unpacked under target/.
# Prints ptxas's resource usage per kernel (registers, stack frame, spills, shared memory), then
# runs the PTX checks in tests/kernels_nvrtc.rs (entry points, local memory in the spill kernel,
# wmma in the BF16 GEMM).
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:-sm_90}

find_lib() {
  if [[ -n "${NVRTC_LIB_DIR:-}" && -e "$NVRTC_LIB_DIR/libnvrtc.so.13" ]]; then
    echo "$NVRTC_LIB_DIR"; return
  fi
  local d
  d=$(python3 - <<'PY' 2>/dev/null || true
import importlib.util, os
spec = importlib.util.find_spec("nvidia")
for root in (spec.submodule_search_locations if spec else []):
    p = os.path.join(root, "cu13", "lib")
    if os.path.exists(os.path.join(p, "libnvrtc.so.13")):
        print(p); break
PY
)
  if [[ -n "$d" ]]; then echo "$d"; return; fi
  local cache=target/nvrtc-wheel
  if [[ ! -e "$cache/nvidia/cu13/lib/libnvrtc.so.13" ]]; then
    mkdir -p "$cache"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$cache" \
      "nvidia-cuda-nvrtc==13.0.*" >&2
    python3 -m zipfile -e "$(ls "$cache"/nvidia_cuda_nvrtc-13.0.*.whl | head -1)" "$cache" >&2
  fi
  (cd "$cache/nvidia/cu13/lib" && pwd)
}

lib=$(find_lib)
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "libnvrtc: $lib/libnvrtc.so.13"

python3 - "$lib/libnvrtc.so.13" "$arch" kernels/*.cu <<'PY'
import ctypes, re, sys
lib = ctypes.CDLL(sys.argv[1])
arch = sys.argv[2]
major, minor = ctypes.c_int(), ctypes.c_int()
lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
print(f"NVRTC {major.value}.{minor.value}, --gpu-architecture={arch} -lineinfo")
failed = False
for path in sys.argv[3:]:
    src = open(path).read()
    prog = ctypes.c_void_p()
    lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), path.encode(), 0, None, None)
    opts = [f"--gpu-architecture={arch}", "-lineinfo", "--ptxas-options=-v"]
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    log = log.value.decode()
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    if rc != 0:
        failed = True
        print(f"{path}: FAILED\n{log}")
        continue
    print(f"{path}:")
    name = None
    for line in log.splitlines():
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            name = m.group(1)
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and name:
            frame = m.groups()
        m = re.search(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?", line)
        if m and name:
            regs, barriers, smem = m.group(1), m.group(2) or "0", m.group(3) or "0"
            print(f"  {name:<28} {regs:>3} regs  {smem:>6} B smem  {barriers} barriers  "
                  f"stack {frame[0]} B  spill st/ld {frame[1]}/{frame[2]} B")
            name = None
sys.exit(1 if failed else 0)
PY

cargo test --test kernels_nvrtc -- --ignored --nocapture
