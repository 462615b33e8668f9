#!/bin/sh
# fuzz-store.sh - build the libFuzzer target for stored records (tests/fuzz_store) with clang and
# run it.
#
#   scripts/fuzz-store.sh [SECONDS] [libFuzzer options...]
#
# SECONDS defaults to 30. The store and the runner are compiled from source with ASan and UBSan
# so an out-of-bounds read in record decoding is caught, not just a crash. The seed corpus is the
# records of a real run (written by the standalone driver's --seeds), new inputs and any crash
# reproducer go to $CAIRN_FUZZ_DIR (default $TMPDIR/cairn-fuzz-store). Reproduce a crash with:
# $CAIRN_FUZZ_DIR/fuzz_store CRASHFILE. CC_FUZZ picks the compiler (default clang).
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-30}
[ $# -gt 0 ] && shift
out=${CAIRN_FUZZ_DIR:-${TMPDIR:-/tmp}/cairn-fuzz-store}
cc=${CC_FUZZ:-clang}

if pkg-config --exists msgpack-c; then mp=msgpack-c; else mp=msgpack; fi
if pkg-config --exists lmdb; then lmdb=$(pkg-config --cflags --libs lmdb); else lmdb=-llmdb; fi
mkdir -p "$out/corpus"

# What a record reader reaches: the core library (libcairn: common/, checkpoint/, runner/).
srcs=$(cd "$root" && ls common/*.c checkpoint/*.c runner/*.c)
files=""
for f in $srcs; do files="$files $root/$f"; done

# shellcheck disable=SC2046,SC2086 # pkg-config output and the file list split into words
common="-std=c11 -D_GNU_SOURCE -DCAIRN__VERSION=\"fuzz\" -g -O1 -I$root/include -I$root $files $root/tests/fuzz_store/fuzz_store.c
        $(pkg-config --cflags --libs jansson "$mp" libcrypto libxxhash) $lmdb -lm -lpthread"

# the seed corpus: valid records from a real run, via the standalone driver
# shellcheck disable=SC2086
"$cc" $common -o "$out/fuzz_store_seeds"
"$out/fuzz_store_seeds" --seeds "$out/corpus"

# shellcheck disable=SC2086
"$cc" -DCAIRN_LIBFUZZER -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    $common -o "$out/fuzz_store"

cd "$out"
# libFuzzer's default malloc limit stays on: a record whose declared lengths make the decoder ask
# for gigabytes is a bug (the store checks lengths against the bytes before msgpack-c sizes an
# allocation by them).
exec ./fuzz_store -max_total_time="$secs" -max_len=4096 -timeout=10 "$@" corpus
