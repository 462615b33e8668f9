#!/usr/bin/env bash
# Configures (once) and builds cairn into ./build. Extra arguments go to `meson setup`.
# In CI (CI set) warnings are errors.
set -euo pipefail
cd "$(dirname "$0")/.."
args=("$@")
if [ -n "${CI:-}" ]; then args+=(-Dwerror=true); fi
if [ ! -f build/build.ninja ]; then
  meson setup build "${args[@]}" >/dev/null
else
  meson setup --reconfigure build "${args[@]}" >/dev/null
fi
ninja -C build >/dev/null
echo "build: ok ($(ls build/cairn build/examples/ledger/cairn-ledger | tr '\n' ' '))"
