#!/bin/sh
# The short form of bench-llama, for CI: `--smoke` (the 15M shape in Q4_0, one round) must exit 0
# and print its row: with the ratios where llama.cpp's peer build is there (CAIRN_PEER_LLAMA_CPP),
# with cairn's figures alone and a line saying so where it is not. It asserts no time.
# TAP on stdout; $1 is the bench-llama binary.
bench=$1
. "$(dirname "$0")/../smoke_tap.sh"
"$bench" --smoke >"$out" 2>&1
rc=$?
check "bench-llama --smoke exits 0 (got $rc)" $rc
if [ -x "$CAIRN_PEER_LLAMA_CPP/llama-bench" ]; then
    grep -qE '^15M +Q4_0 +[0-9.]+ +[0-9.]+ +[0-9.]+x +[0-9.]+ +[0-9.]+ +[0-9.]+x ' "$out"
    check "a row of cairn's and llama.cpp's pp and tg with their ratios" $?
else
    grep -q "no llama.cpp peer" "$out"
    check "says that the peer is missing" $?
    grep -qE '^15M +Q4_0 +[0-9.]+ +- +- +[0-9.]+ +- +- ' "$out"
    check "a row of cairn's pp and tg alone" $?
fi
# without a peer at all: cairn's figures alone, still exit 0
CAIRN_PEER_LLAMA_CPP=/nonexistent "$bench" --smoke --peer /nonexistent >"$out.2" 2>&1
rc=$?
check "--peer /nonexistent exits 0 (got $rc)" $rc
grep -q "no llama.cpp peer" "$out.2"
check "--peer /nonexistent says the peer is missing" $?
"$bench" --rounds 0 >/dev/null 2>&1
rc=$?
[ "$rc" -eq 64 ]
check "--rounds 0 is bad usage: exit 64 (got $rc)" $?
smoke_end "$out.2"
rm -f "$out.2"
