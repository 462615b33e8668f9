#!/bin/sh
# fuzz-canon.sh - build the libFuzzer target for common/'s JSON, canonical form and JSON<->msgpack with clang; run it.
#
#   scripts/fuzz-canon.sh [SECONDS] [libFuzzer options...]
#
# SECONDS defaults to 30. The seed corpus is tests/canon/vectors/*.json; new inputs and any
# crash reproducer go to $CAIRN_FUZZ_DIR (default $TMPDIR/cairn-fuzz-canon). Reproduce a crash
# with: $CAIRN_FUZZ_DIR/fuzz_canon CRASHFILE. CC_FUZZ picks the compiler (default clang).
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-30}
[ $# -gt 0 ] && shift
out=${CAIRN_FUZZ_DIR:-${TMPDIR:-/tmp}/cairn-fuzz-canon}
cc=${CC_FUZZ:-clang}

if pkg-config --exists msgpack-c; then mp=msgpack-c; else mp=msgpack; fi
mkdir -p "$out/corpus"
cp "$root"/tests/canon/vectors/*.json "$out/corpus/"

# shellcheck disable=SC2046 # pkg-config output is meant to split into words
"$cc" -std=c11 -D_GNU_SOURCE -DCAIRN_LIBFUZZER -g -O1 \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root/include" -I"$root" \
    "$root/common/json.c" "$root/common/canon.c" "$root/common/jsonmp.c" "$root/common/taskid.c" \
    "$root/common/str.c" "$root/common/utf8.c" "$root/common/hash.c" "$root/tests/fuzz_canon/fuzz_canon.c" \
    $(pkg-config --cflags --libs jansson "$mp" libcrypto) -lm \
    -o "$out/fuzz_canon"

cd "$out"
exec ./fuzz_canon -max_total_time="$secs" -max_len=65536 -timeout=10 \
    -dict="$root/tests/fuzz_canon/json.dict" "$@" corpus
