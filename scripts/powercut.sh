#!/bin/sh
# powercut.sh - the long power-cut run: many cuts of a concurrent ledger + pipe workload against
# a modelled disk (tests/crash/test_powercut.c, suite powercut-long), with the totals printed:
# how many cuts left unflushed pages, how many reboots discarded relaxed commits, violations.
#
#   scripts/powercut.sh [CUTS] [SEED]
#
# CUTS defaults to 300 (about 4 minutes on an idle 2-core machine; the default test suite runs
# 30), SEED to a fresh one each time (printed, so a failure can be replayed with the same
# schedule; the moments of the cuts also depend on timing, so a replay is close, not exact).
# BUILD names the build directory (default ./build, built first by scripts/build.sh when it is
# ./build). CAIRN_TEST_KEEP=1 keeps every cut's directory; a failing cut's is always kept, and
# named in the report.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
cuts=${1:-300}
seed=${2:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
build=${BUILD:-$root/build}

case $cuts in
'' | *[!0-9]* | 0)
    echo "powercut.sh: CUTS must be a number of cuts (1 or more), not '$cuts'" >&2
    exit 64
    ;;
esac
case $seed in
'' | *[!0-9]*)
    echo "powercut.sh: SEED must be a number, not '$seed'" >&2
    exit 64
    ;;
esac

if [ "$build" = "$root/build" ]; then
    bash "$root/scripts/build.sh" >/dev/null
elif [ ! -f "$build/build.ninja" ]; then
    echo "powercut.sh: $build is not a configured build directory" >&2
    exit 66
fi

echo "powercut: $cuts cuts, seed $seed (replay: scripts/powercut.sh $cuts $seed)"
rc=0
CAIRN_POWERCUT_LONG_CUTS=$cuts CAIRN_POWERCUT_SEED=$seed \
    meson test -C "$build" --suite powercut-long --print-errorlogs >/dev/null || rc=$?
# the test's own report: each failing cut with its violations and directory, the totals and
# the final checks (the passing cuts' own lines are left out)
log=$build/meson-logs/testlog.txt
grep -E '^(# |ok |not ok |Bail out)' "$log" | grep -vE '^(ok [0-9]+ - cut |# +failed at )' || true
echo "powercut: exit $rc"
exit $rc
