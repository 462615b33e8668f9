#!/usr/bin/env bash
# Builds cairn and runs the whole test suite (unit, integration, crash, fuzz in short form;
# GPU tests skip without a device). Extra arguments go to `meson test`.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh || exit 1
meson test -C build --print-errorlogs --num-processes 2 "$@"
