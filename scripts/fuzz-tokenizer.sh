#!/bin/sh
# scripts/fuzz-tokenizer.sh - build the tokenizer's libFuzzer target with clang and run it.
#
#   scripts/fuzz-tokenizer.sh [SECONDS] [extra libFuzzer flags...]     (default 30 seconds)
#
# The longer campaign; the test suite fuzzes the same target for 20 s (fuzz_tokenizer_libfuzzer,
# in suite 'fuzz', when clang links libFuzzer). Builds ${FUZZ_DIR:-/tmp/cairn-fuzz-tokenizer}/
# fuzz_tokenizer (ASan+UBSan) and fuzzes it, starting from the seed corpus the deterministic
# driver writes (`--write-corpus`): a few texts under several selector bytes (the first byte of
# an input picks the tokenizer and the special-token flags), and the reference test texts in
# $CAIRN_TESTDATA/tokenizers (default ../shared/testdata) when present. The corpus grows across
# runs. Crashes land in $FUZZ_DIR as crash-* files; reproduce with
#   $FUZZ_DIR/fuzz_tokenizer $FUZZ_DIR/crash-...
set -eu

secs=${1:-30}
[ $# -gt 0 ] && shift
root=$(cd "$(dirname "$0")/.." && pwd)
out=${FUZZ_DIR:-/tmp/cairn-fuzz-tokenizer}
cc=${CLANG:-$(command -v clang || command -v clang-14)}
testdata=${CAIRN_TESTDATA:-$root/../shared/testdata}

mkdir -p "$out/corpus"
srcs="$root/gpu/tokenizer.c $root/gpu/tokenizer_decode.c $root/gpu/tokenizer_encode.c
    $root/gpu/tokenizer_load.c $root/gpu/tokenizer_special.c $root/gpu/gguf.c $root/gpu/gguf_open.c
    $root/gpu/gguf_types.c"
flags="-std=c11 -D_GNU_SOURCE -g -O1 -I $root/include -I $root"

echo "building $out/fuzz_tokenizer with $cc"
# shellcheck disable=SC2086
"$cc" $flags -DCAIRN_LIBFUZZER -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    "$root/tests/fuzz_tokenizer/fuzz_tokenizer.c" $srcs -o "$out/fuzz_tokenizer" -lm
# the seeds come from the deterministic driver, as in the test suite (scripts/fuzz-run.sh)
# shellcheck disable=SC2086
"$cc" $flags "$root/tests/fuzz_tokenizer/fuzz_tokenizer.c" $srcs -o "$out/seed_writer" -lm
CAIRN_TESTDATA=$testdata "$out/seed_writer" --write-corpus "$out/corpus"

echo "fuzzing for $secs seconds"
cd "$out"
exec ./fuzz_tokenizer -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 "$@" corpus
