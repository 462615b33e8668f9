#!/bin/sh
# scripts/fuzz-run.sh - run a built libFuzzer target briefly over a fresh seed corpus, as a TAP test.
#
#   scripts/fuzz-run.sh [--seconds N] [--max-len N] TARGET SEED_WRITER DIR
#
# This is what meson's suite 'fuzz' runs for each libFuzzer target (tests/fuzz_gguf/meson.build,
# tests/fuzz_tokenizer/meson.build). DIR/corpus is emptied and refilled by
# `SEED_WRITER --write-corpus DIR/corpus` (the target's deterministic driver), so every run
# starts from the same seeds; then TARGET fuzzes for N seconds (default 20) in one process.
# A crash, a sanitizer report, a leak, an input slower than 10 s or a process over 2 GB fails the
# test: libFuzzer exits non-zero and saves the input as DIR/artifacts/crash-*, leak-*, timeout-*
# or oom-*. The TAP output then names that file, the command that reproduces it and the
# sanitizer's or libFuzzer's report (all of it is in DIR/fuzz.log). Artifacts of earlier runs are
# kept; only new ones count. Longer campaigns: scripts/fuzz-gguf.sh and scripts/fuzz-tokenizer.sh.
set -u

usage() {
    echo "usage: fuzz-run.sh [--seconds N] [--max-len N] TARGET SEED_WRITER DIR" >&2
    exit 64
}

secs=20
maxlen=""
while [ $# -gt 0 ]; do
    case $1 in
    --seconds)
        [ $# -ge 2 ] || usage
        secs=$2
        shift 2
        ;;
    --max-len)
        [ $# -ge 2 ] || usage
        maxlen=$2
        shift 2
        ;;
    -*) usage ;;
    *) break ;;
    esac
done
[ $# -eq 3 ] || usage
case $secs in '' | *[!0-9]*) usage ;; esac
case $maxlen in *[!0-9]*) usage ;; esac
target=$1
writer=$2
dir=$3
name=$(basename "$target")
log=$dir/fuzz.log

echo "1..1"
# fail SUMMARY [DIAGNOSTIC LINE...]
fail() {
    echo "not ok 1 - $name: $1"
    shift
    for line in "$@"; do
        echo "# $line"
    done
    exit 1
}

[ -x "$target" ] || fail "no libFuzzer target at $target"
mkdir -p "$dir/artifacts" || fail "cannot create $dir/artifacts"
rm -rf "$dir/corpus"
if ! out=$("$writer" --write-corpus "$dir/corpus" 2>&1); then
    fail "the seed writer failed: $writer --write-corpus $dir/corpus" "$out"
fi
n_seeds=$(find "$dir/corpus" -type f | wc -l)
[ "$n_seeds" -gt 0 ] || fail "$writer wrote no seeds into $dir/corpus"

# artifacts newer than this mark are this run's (a rerun that finds the same input again
# rewrites the same file name)
touch "$dir/started"
# -artifact_prefix needs the trailing slash: it is a prefix, not a folder
"$target" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 ${maxlen:+-max_len=$maxlen} \
    -print_final_stats=1 -artifact_prefix="$dir/artifacts/" "$dir/corpus" >"$log" 2>&1
rc=$?
new=$(find "$dir/artifacts" -type f -newer "$dir/started")

if [ "$rc" -ne 0 ] || [ -n "$new" ]; then
    echo "not ok 1 - $name: libFuzzer failed (exit status $rc) after fuzzing from $n_seeds seeds"
    for f in $new; do
        echo "# failing input: $f"
        echo "# reproduce:     $target $f"
    done
    grep -m1 'INFO: Seed:' "$log" | sed 's/^/# /'
    # the report from its first line (a sanitizer's ERROR, libFuzzer's timeout ALARM, UBSan's
    # "runtime error", the target's own message), else the end of the log
    first=$(grep -n -m1 -E 'ERROR|ALARM|runtime error|property violated|deadly signal' "$log" |
        cut -d: -f1)
    if [ -n "$first" ]; then
        echo "# report ($log, from line $first):"
        sed -n "$first,$((first + 29))p" "$log" | sed 's/^/#   /'
        grep -m1 '^SUMMARY:' "$log" | sed 's/^/#   /'
    else
        echo "# last lines of $log:"
        tail -n 30 "$log" | sed 's/^/#   /'
    fi
    exit 1
fi

done_line=$(grep -m1 '^Done [0-9]* runs in' "$log")
[ -n "$done_line" ] || fail "libFuzzer exited 0 without finishing a run; see $log" \
    "$(tail -n 20 "$log")"
runs=$(echo "$done_line" | sed 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1 inputs in \2 s/')
cov=$(grep -E '^#[0-9]+' "$log" | tail -n 1 | grep -o 'cov: [0-9]* ft: [0-9]*')
grown=$(find "$dir/corpus" -type f | wc -l)
echo "ok 1 - $name: $runs, no crash, leak or timeout ($n_seeds seeds, corpus now $grown; $cov)"
