#!/bin/sh
# The consume section with a few tasks, for CI: `--only consume --quick --consume-tasks 16` must
# exit 0 (which it does only if every task of every run succeeded, on both sides, and each store
# holds them all) and print every row of its table. It asserts no time: the numbers are the
# benchmark's to report. TAP on stdout; $1 is the bench-store binary, $2 cairn-ledger.
bench=$1
ledger=$2
. "$(dirname "$0")/../smoke_tap.sh"
"$bench" --only consume --quick --consume-tasks 16 --ledger "$ledger" >"$out" 2>&1
rc=$?
check "bench-store --only consume --quick --consume-tasks 16 exits 0 (got $rc)" $rc
for row in "7. consume on the ledger graph, power-loss durability (16 tasks a run" \
    "cairn tasks/s" "SQLite tasks/s" "cairn flushes/task" "target: cairn / SQLite at K = 16"; do
    grep -qF -- "$row" "$out"
    check "prints '$row'" $?
done
# a row per K: two rates, a ratio and the flushes a task
for k in 1 4 16; do
    grep -qE "^  $k +[0-9]+ +[0-9]+ +[0-9.]+x +[0-9.]+$" "$out"
    check "a row for K = $k" $?
done
grep -qE "target: .*x (PASS|MISS)$" "$out"
check "the target line says PASS or MISS" $?
# a bad task count is bad usage, refused before anything runs
"$bench" --only consume --consume-tasks 0 >/dev/null 2>&1
rc=$?
[ "$rc" -eq 64 ]
check "--consume-tasks 0 is bad usage: exit 64 (got $rc)" $?
smoke_end
