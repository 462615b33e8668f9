#!/bin/sh
# long_run.sh - runs one of the long test suites that the default suite runs in a short form,
# and prints the test's own report. Used by scripts/soak.sh and scripts/powercut.sh.
#
#   scripts/long_run.sh NAME SUITE COUNT_VAR SEED_VAR COUNT [SEED]
#
# NAME is for messages, SUITE the meson suite, COUNT_VAR and SEED_VAR the environment variables
# the test reads its count and seed from. SEED defaults to a fresh one (printed, so a failure
# can be replayed). BUILD names the build directory (default ./build, built first by
# scripts/build.sh when it is ./build). REPORT_SKIP is an extended regular expression of report
# lines to leave out.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
name=$1 suite=$2 count_var=$3 seed_var=$4 count=$5
seed=${6:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
build=${BUILD:-$root/build}

case $count in
'' | *[!0-9]* | 0)
    echo "$name.sh: the count must be a number (1 or more), not '$count'" >&2
    exit 64
    ;;
esac
case $seed in
'' | *[!0-9]*)
    echo "$name.sh: SEED must be a number, not '$seed'" >&2
    exit 64
    ;;
esac

if [ "$build" = "$root/build" ]; then
    bash "$root/scripts/build.sh" >/dev/null
elif [ ! -f "$build/build.ninja" ]; then
    echo "$name.sh: $build is not a configured build directory" >&2
    exit 66
fi

echo "$name: $count, seed $seed (replay: scripts/$name.sh $count $seed)"
rc=0
env "$count_var=$count" "$seed_var=$seed" \
    meson test -C "$build" --suite "$suite" --print-errorlogs >/dev/null || rc=$?
# the test's own report is in the log
grep -E '^(# |ok |not ok |Bail out)' "$build/meson-logs/testlog.txt" |
    grep -vE "${REPORT_SKIP:-^\$^}" || true
echo "$name: exit $rc"
exit $rc
