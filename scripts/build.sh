#!/usr/bin/env bash
# Configures (once) and builds cairn into ./build. Extra arguments go to `meson setup`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
  meson setup build "$@" >/dev/null
else
  meson setup --reconfigure build "$@" >/dev/null
fi
ninja -C build >/dev/null
echo "build: ok ($(ls build/cairn build/examples/ledger/cairn-ledger | tr '\n' ' '))"
