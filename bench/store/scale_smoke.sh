#!/bin/sh
# The short form of bench-store's scale mode, for CI: `--only scale --quick` must exit 0 and
# print every row of its table. It asserts no time: the numbers are the benchmark's to report.
# TAP on stdout; $1 is the bench-store binary.
bench=$1
. "$(dirname "$0")/../smoke_tap.sh"
"$bench" --only scale --quick >"$out" 2>&1
rc=$?
check "bench-store --only scale --quick exits 0 (got $rc)" $rc
for row in "== scale: one store filled to 20000 tasks in process" \
    "store: nosync" "tasks in the store " "commit rate (tasks/s, interval)" \
    "commit rate / a fresh store's" \
    "resume read (us/step, p50)" "retry, 1000 due (ms)" "retry, nothing due (ms)" \
    "list --status failed --limit 100" "list, all tasks (ms)" "stats (ms)" \
    "gc of a 1000-task slice (ms)" "gc again, nothing new (ms)" "file size (MB, allocated)" "bytes/task (pages in use)" \
    "growth: the last column over the first"; do
    grep -qF -- "$row" "$out"
    check "prints '$row'" $?
done
# each measured row has a value at 10k and at 20k tasks and a growth ratio
rows=$(grep -cE '^[a-z].*  +[0-9.]+ +[0-9.]+ +[0-9.]+x$' "$out")
[ "$rows" -eq 12 ]
check "12 rows of two values and a growth ratio (got $rows)" $?
# --scale-max below the first checkpoint is bad usage, refused before anything is filled
"$bench" --only scale --scale-max 9999 >/dev/null 2>&1
rc=$?
[ "$rc" -eq 64 ]
check "--scale-max 9999 is bad usage: exit 64 (got $rc)" $?
smoke_end
