#!/usr/bin/env bash
# Installs the Debian packages where they are missing (scripts/install-deps.sh), builds cairn
# and runs the whole test suite (unit, integration, crash, fuzz in short form;
# GPU tests skip without a device). Extra arguments go to `meson test`.
set -uo pipefail
cd "$(dirname "$0")/.."
# a fresh machine: the Debian packages first, as quickstart.sh installs them
if ! command -v meson >/dev/null 2>&1 || ! pkg-config --exists jansson libmicrohttpd 2>/dev/null; then
  bash scripts/install-deps.sh || exit 1
fi
bash scripts/build.sh || exit 1
meson test -C build --print-errorlogs --num-processes 2 "$@"
