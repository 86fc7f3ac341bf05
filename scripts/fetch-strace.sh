#!/usr/bin/env bash
# Fetches Debian's strace and the one library it needs beyond libc (libunwind8), unpacked into
# gpu-tools/strace/ (ignored by git), for hosts that have no strace: scripts/gpu-bundle.sh copies
# it into the bundle and scripts/pc-sampling-diagnose.sh runs it with LD_LIBRARY_PATH pointing
# at its library. Needs apt-get and dpkg (a Debian or Ubuntu machine); the binary runs on any
# x86-64 glibc 2.36 or newer (Ubuntu 24.04 has 2.39).
set -euo pipefail
cd "$(dirname "$0")/.."
out=gpu-tools
mkdir -p "$out/debs"
(cd "$out/debs" && apt-get download strace:amd64 libunwind8:amd64)
rm -rf "$out/strace"
for deb in "$out"/debs/*.deb; do dpkg -x "$deb" "$out/strace"; done
LD_LIBRARY_PATH="$out/strace/usr/lib/x86_64-linux-gnu" "$out/strace/usr/bin/strace" -V | head -1
