#!/bin/sh
# soak.sh - the long crash soak: thousands of SIGKILLs spread over every phase of the ledger
# graph (tests/crash/test_soak.c, suite soak-long), with the phase histogram printed.
#
#   scripts/soak.sh [KILLS] [SEED]
#
# KILLS defaults to 2000 (about 2 minutes on an idle 2-core machine; the default test suite
# runs 200 of them), SEED to a fresh one each time (printed, so a failure can be replayed with
# the same schedule). BUILD names the build directory (default ./build, built first by
# scripts/build.sh when it is ./build). CAIRN_TEST_KEEP=1 keeps the store and files afterwards.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
kills=${1:-2000}
seed=${2:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
build=${BUILD:-$root/build}

case $kills in
'' | *[!0-9]*)
    echo "soak.sh: KILLS must be a number, not '$kills'" >&2
    exit 64
    ;;
esac
case $seed in
'' | *[!0-9]*)
    echo "soak.sh: SEED must be a number, not '$seed'" >&2
    exit 64
    ;;
esac

if [ "$build" = "$root/build" ]; then
    bash "$root/scripts/build.sh" >/dev/null
elif [ ! -f "$build/build.ninja" ]; then
    echo "soak.sh: $build is not a configured build directory" >&2
    exit 66
fi

echo "soak: $kills kills, seed $seed (replay: scripts/soak.sh $kills $seed)"
rc=0
CAIRN_SOAK_LONG_KILLS=$kills CAIRN_SOAK_SEED=$seed \
    meson test -C "$build" --suite soak-long --print-errorlogs >/dev/null || rc=$?
# the test's own report (histogram of where the kills landed, violations) is in the log
grep -E '^(# |ok |not ok |Bail out)' "$build/meson-logs/testlog.txt" || true
echo "soak: exit $rc"
exit $rc
