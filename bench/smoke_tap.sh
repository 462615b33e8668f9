# bench/smoke_tap.sh - sourced by the benchmarks' smoke scripts (bench_*_smoke in the bench-smoke
# suite): a scratch file $out for the benchmark's output, removed at exit, and TAP checks.
#   check "description" STATUS   prints "ok N - ..." or "not ok N - ..." (STATUS 0 is ok)
#   smoke_end [FILE...]           on a failure shows $out (and the FILEs) as TAP comments, then
#                                 prints the plan
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT
n=0
fail=0
check() {
    n=$((n + 1))
    if [ "$2" -eq 0 ]; then echo "ok $n - $1"; else echo "not ok $n - $1"; fail=1; fi
}
smoke_end() {
    [ "$fail" -eq 0 ] || sed 's/^/# /' "$out" "$@"
    echo "1..$n"
}
