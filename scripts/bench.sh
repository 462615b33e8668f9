#!/usr/bin/env bash
# Builds (configuring ./build once if needed) and runs the checkpoint store benchmark.
# Arguments go to bench-store: --quick (about 20 s), --json, --dir DIR, --only SECTIONS,
# --ledger PATH. Build output goes to stderr, so `--json` leaves stdout a clean document.
# See bench/README.md for what is measured and how to read it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
  meson setup build >&2
fi
# Only what the benchmark needs: a half-finished file elsewhere in the tree does not stop it.
ninja -C build bench/store/bench-store examples/ledger/cairn-ledger >&2
exec build/bench/store/bench-store "$@"
