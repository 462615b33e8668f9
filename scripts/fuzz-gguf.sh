#!/bin/sh
# scripts/fuzz-gguf.sh - build the GGUF reader's libFuzzer target with clang and run it.
#
#   scripts/fuzz-gguf.sh [SECONDS] [extra libFuzzer flags...]     (default 30 seconds)
#
# The longer campaign; the test suite fuzzes the same target for 20 s (fuzz_gguf_libfuzzer, in
# suite 'fuzz', when clang links libFuzzer). Builds into ${FUZZ_DIR:-/tmp/cairn-fuzz-gguf}: the
# libFuzzer binary (ASan+UBSan) and, with the same clang but without libFuzzer, the standalone
# driver, used to write the seed corpus (files from the test writer: every KV and tensor type,
# v2/v3, several alignments). The real vocabulary files in $CAIRN_TESTDATA/tokenizers (default
# ../shared/testdata) are added as seeds; libFuzzer reads only their first -max_len bytes (64 KiB),
# so they seed cut-off vocabularies (the suite's short run leaves them out; the deterministic
# test fuzz_gguf walks them whole). The corpus grows across runs. Crashes land in $FUZZ_DIR as
# crash-* files; reproduce with
#   $FUZZ_DIR/fuzz_gguf $FUZZ_DIR/crash-...
set -eu

secs=${1:-30}
[ $# -gt 0 ] && shift
root=$(cd "$(dirname "$0")/.." && pwd)
out=${FUZZ_DIR:-/tmp/cairn-fuzz-gguf}
cc=${CLANG:-$(command -v clang || command -v clang-14)}
testdata=${CAIRN_TESTDATA:-$root/../shared/testdata}

mkdir -p "$out/corpus"
srcs="$root/gpu/gguf.c $root/gpu/gguf_open.c $root/gpu/gguf_types.c"
defs=""
if [ -f "$root/gpu/quant.c" ]; then
    srcs="$srcs $root/gpu/quant.c"
    defs="-DGW_HAVE_QUANT=1"
fi
flags="-std=c11 -D_GNU_SOURCE -g -O1 -I $root/include -I $root $defs"

echo "building $out/fuzz_gguf with $cc"
# shellcheck disable=SC2086
"$cc" $flags -DCAIRN_LIBFUZZER -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    "$root/tests/fuzz_gguf/fuzz_gguf.c" $srcs -o "$out/fuzz_gguf" -lm
# shellcheck disable=SC2086
"$cc" $flags "$root/tests/fuzz_gguf/fuzz_gguf.c" "$root/tests/gguf_writer.c" $srcs \
    -o "$out/seed_writer" -lm
"$out/seed_writer" --write-corpus "$out/corpus"
for f in "$testdata"/tokenizers/*.gguf; do
    [ -f "$f" ] && cp "$f" "$out/corpus/"
done

echo "fuzzing for $secs seconds"
cd "$out"
exec ./fuzz_gguf -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 "$@" corpus
