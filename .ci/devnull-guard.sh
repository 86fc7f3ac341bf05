# Sourced by .ci/run. The CI sandbox has been seen with /dev/null as a regular file (seen on
# 2026-11-29): build scripts' probes write their errors there, and cargo's target probe
# (`rustc - --print=...`, stdin = /dev/null) later reads them back as Rust source and fails
# with "failed to run `rustc` to learn about target-specific information". Restore the device;
# where that is not allowed, empty the file before each cargo step instead.
devnull_guard() {
  [[ -c /dev/null ]] && return 0
  local fresh=/dev/null.gpu-ledger.$$
  if mknod -m 666 "$fresh" c 1 3 && mv -f "$fresh" /dev/null; then
    echo "ci: /dev/null was a regular file; restored the character device" >&2
  else
    rm -f "$fresh"
    : >/dev/null
    echo "ci: /dev/null is a regular file and cannot be restored here; emptied it" >&2
  fi
}
