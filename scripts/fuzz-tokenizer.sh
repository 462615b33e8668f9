#!/bin/sh
# scripts/fuzz-tokenizer.sh - build the tokenizer's libFuzzer target with clang and run it.
#
#   scripts/fuzz-tokenizer.sh [SECONDS] [extra libFuzzer flags...]     (default 30 seconds)
#
# Builds ${FUZZ_DIR:-/tmp/cairn-fuzz-tokenizer}/fuzz_tokenizer (ASan+UBSan) and fuzzes it,
# starting from a small seed corpus of texts (the first byte of an input picks the tokenizer and
# the special-token flags). The reference test strings in $CAIRN_TESTDATA/tokenizers (default
# ../shared/testdata) are added as seeds when present. Crashes land in $FUZZ_DIR as crash-*
# files; reproduce with  $FUZZ_DIR/fuzz_tokenizer $FUZZ_DIR/crash-...
set -eu

secs=${1:-30}
[ $# -gt 0 ] && shift
root=$(cd "$(dirname "$0")/.." && pwd)
out=${FUZZ_DIR:-/tmp/cairn-fuzz-tokenizer}
cc=${CLANG:-$(command -v clang || command -v clang-14)}
testdata=${CAIRN_TESTDATA:-$root/../shared/testdata}

mkdir -p "$out/corpus"
echo "building $out/fuzz_tokenizer with $cc"
"$cc" -std=c11 -D_GNU_SOURCE -g -O1 -I "$root/include" -I "$root" -DCAIRN_LIBFUZZER \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    "$root/tests/fuzz_tokenizer/fuzz_tokenizer.c" "$root/gpu/tokenizer.c" \
    "$root/gpu/tokenizer_decode.c" "$root/gpu/tokenizer_encode.c" "$root/gpu/tokenizer_load.c" \
    "$root/gpu/tokenizer_special.c" "$root/gpu/gguf.c" "$root/gpu/gguf_open.c" \
    "$root/gpu/gguf_types.c" \
    -o "$out/fuzz_tokenizer" -lm

# seeds: each text once per tokenizer/flag selector byte
i=0
for text in "Hello world" "don't stop 12345" "<|im_start|>user
hi<|im_end|>" "  日本語 😀 ✅" "x'S 'll \t\t\r\n\n"; do
    for sel in 0 1 2 3 4 20 28; do
        printf "\\$(printf %03o "$sel")%s" "$text" > "$out/corpus/seed-$i-$sel"
    done
    i=$((i + 1))
done
if [ -d "$testdata/tokenizers" ]; then
    for f in "$testdata"/tokenizers/*.inp; do
        [ -f "$f" ] || continue
        for sel in 0 4; do
            { printf "\\$(printf %03o "$sel")"; cat "$f"; } > "$out/corpus/ref-$(basename "$f")-$sel"
        done
    done
fi

echo "fuzzing for $secs seconds"
cd "$out"
exec ./fuzz_tokenizer -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 "$@" corpus
