#!/usr/bin/env bash
# Renders the HTML report in headless Chromium (tests/export_browser.rs, an ignored test because
# CI machines have no browser). Installs Debian's chromium first when no browser is found.
# Screenshots are left in target/browser-test/*.png.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1 \
    && ! command -v chromium-browser >/dev/null 2>&1; then
  echo "chromium not found: installing Debian's chromium"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
      echo "error: not root and no sudo: install chromium (apt-get install -y chromium) and rerun" >&2
      exit 1
    fi
  fi
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y chromium
fi
cargo test -p gpu-ledger-tools --test export_browser -- --ignored --nocapture
