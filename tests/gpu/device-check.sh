#!/usr/bin/env bash
# tests/gpu/device-check.sh - the one script a short GPU lease runs (about 4 minutes on an H200).
#
#   1. builds with -Dcuda=enabled into build-gpu and runs `meson test --suite gpu` (verbose);
#      if the machine lacks the project's build dependencies (lmdb, msgpack, ...), it runs the
#      binaries prepared beforehand by `tests/gpu/device-check.sh --prepare` instead (built on
#      the development machine into build/gpu-prebuilt/, without OpenBLAS so that they need
#      nothing but libc; the CUDA backend is the module libcairn-cuda.so beside them, which
#      needs the CUDA toolkit's cudart/cuBLAS, and which they load through CAIRN_CUDA_PLUGIN
#      since the build-tree path compiled into them is not here); the gpu test includes the
#      device sampler: alone against the host's pick, and the engine sampling on the device
#      against the engine sampling on the host (when the gpu tests fail, their quick cases run
#      again as built, with CAIRN_CUDA_PDL=0 and with CAIRN_CUDA_GEMV=cublas: which setting the
#      failure follows is in the summary);
#   2. runs the quick cases once more under compute-sanitizer (memcheck, then racecheck for the
#      kernels' shared memory), if the tool is there; when built here, the CUDA module loader's
#      test (cuda-plugin); and the command line itself (cli.txt): `cairn model-info` and
#      `cairn generate --backend cuda` on a 110M F16 model file against `--backend cpu` (the
#      prepared binaries include cairn, cairn-mkmodel and the libraries cairn needs, in lib/),
#      and the main job of scripts/quickstart.sh (retrieve -> generate -> postprocess -> notify
#      to a webhook receiver on 127.0.0.1, run twice) with generate.backend "cuda": the checks
#      first, so that a run cut short still has them;
#   3. runs bench-llm: a generated 1.1B-parameter llama (F16, 2.2 GB) on CUDA, a 1.7B one with
#      fewer, wider layers, one of Qwen2.5-0.5B's shape (a vocabulary of 151936: the device
#      sampler's cost shows in the "sampled" column), two quantized types, the Qwen2.5-0.5B
#      shape after a 1024-token prompt with an f32 and an f16 KV cache, one of Llama-3-8B's
#      shape (16 GB, second, after the 1.1B one: the full-size model the 70 % target is most
#      likely met on), and (last of all, after the profile below) the 1.1B one on the CPU;
#      decode tok/s against the roofline = device-to-device copy bandwidth (measured in the same
#      run) / bytes of weights read per token; each CUDA row is followed by its peer, a "cublas"
#      row (CAIRN_CUDA_GEMV=cublas: decode products through cuBLAS instead of cairn's decode
#      kernel), and the ratio of the two; the 1.1B one runs again with CAIRN_CUDA_PDL=0 (rows
#      "nopdl": ordinary launches, what programmatic dependent launch gains);
#      then the 1.1B one on CUDA once more with CAIRN_CUDA_PROFILE=1: the time of each
#      operation of a decode step (eager), so one lease also shows where the time goes;
#      the profile begins with the decode products' splits as the backend timed them at load
#      (each product's time at each split, the chosen one and its GB/s), and the 1.7B one is
#      profiled the same way (sweep.txt);
#   4. (after the first 1.1B row, in --short too) runs bench-batch on the GPU: batched decoding's
#      aggregate tok/s at 1, 2, 4, 8, 16 and 32 sequences over the CUDA backend's paged pool
#      (gpu/cuda/backend_paged.cuh), the 1.1B shape in F16 and the 110M one, each B as a ratio to
#      B = 1, and the batch of one against the solo decode; then the 110M one again with
#      CAIRN_CUDA_BATCH_GEMM=2 (the opt-in that runs each product of a batch as one cuBLAS GEMM,
#      not batch invariant): what it gains over the invariant kernel (in bench.log and the
#      summary). Batched
#      correctness against the CPU and batch invariance bit for bit are in the gpu tests (the
#      "paged:" lines: 20 sequences batched against each alone, and each alone against the CPU);
#   5. prints a short table last. With $OUT set, every log is written there as it grows, so a
#      run cut short still returns what it did. Each step has a time limit (together they
#      could pass 10 minutes, so the run's own limit can cut the last ones). The first lease
#      (2026-11-30, prebuilt binaries) took 100 s before the split sweep and racecheck were
#      added; expect about 4 minutes, and give the call 8.
#
# It changes no device setting. Exit status: 0 when the gpu tests passed (not skipped), else 1.
#
# Usage, on the GPU machine, from the repository root:   bash tests/gpu/device-check.sh [--short]
#   --short: a session's second lease, after a kernel change (about 3 minutes): the gpu tests,
#   memcheck, and the 1.1B, 8B and 1.7B decode rows with the timed splits and the profile; no
#   racecheck, command line, main job or other rows.
# Before a lease, on the development machine (optional fallback): bash tests/gpu/device-check.sh --prepare
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$(pwd)
OUTDIR=${OUT:-}
PREBUILT=build/gpu-prebuilt
export PATH="$PATH:/usr/local/cuda/bin"

SHORT=0
[ "${1:-}" = "--short" ] && SHORT=1
if [ "${1:-}" = "--prepare" ]; then
    dir=/tmp/cairn-gpu-prepare
    rm -rf "$dir"
    meson setup "$dir" -Dcuda=enabled -Dopenblas=disabled >/dev/null || exit 1
    ninja -C "$dir" tests/gpu/test_gpu bench/llm/bench-llm bench/llm/bench-batch \
        gpu/libcairn-cuda.so cairn tests/model/cairn-mkmodel || exit 1
    rm -rf "$PREBUILT"
    mkdir -p "$PREBUILT/lib"
    cp "$dir/tests/gpu/test_gpu" "$dir/bench/llm/bench-llm" "$dir/bench/llm/bench-batch" \
        "$dir/gpu/libcairn-cuda.so" \
        "$dir/cairn" "$dir/tests/model/cairn-mkmodel" "$PREBUILT/" || exit 1
    # the command line's own libraries (lmdb, msgpack, jansson, curl and theirs), which the GPU
    # machine does not have: beside it, found through LD_LIBRARY_PATH there (glibc stays the
    # machine's own, which is newer)
    ldd "$dir/cairn" | awk '$3 ~ /^\// {print $3}' |
        grep -vE '/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^/]*)\.so' |
        xargs -r cp -L -t "$PREBUILT/lib" || exit 1
    du -sh "$PREBUILT" | sed 's/^/size: /'
    { git rev-parse HEAD 2>/dev/null; date -u; git status --short 2>/dev/null | head -5; } >"$PREBUILT/STAMP"
    echo "prepared $PREBUILT (carry it: run(carry=[\"$PREBUILT\"]))"
    for f in test_gpu libcairn-cuda.so cairn; do
        echo "$f:"
        readelf -d "$PREBUILT/$f" | grep -E 'NEEDED|RUNPATH'
    done
    exit 0
fi

log() { printf '\n=== %s\n' "$*"; }
# The logs worth reading go straight to $OUT when it is set (LOGS), so a run cut short by the
# lease still returns them; the lease returns at most 8 files, so scratch files go elsewhere (TMP).
TMP=$(mktemp -d)
if [ -n "$OUTDIR" ]; then LOGS=$OUTDIR; else LOGS=$TMP; fi
START=$(date +%s)

log "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$TMP/machine.txt"
nvcc --version 2>&1 | tail -2 | tee -a "$TMP/machine.txt"
nproc | sed 's/^/cpus: /' | tee -a "$TMP/machine.txt"

log "build (meson setup build-gpu -Dcuda=enabled)"
BIN_TEST=""
BIN_BENCH=""
BIN_BATCH=""
MODE=""
if meson setup build-gpu -Dcuda=enabled --reconfigure >"$TMP/build.log" 2>&1 ||
    meson setup build-gpu -Dcuda=enabled >>"$TMP/build.log" 2>&1; then
    if ninja -C build-gpu >>"$TMP/build.log" 2>&1; then
        BIN_TEST=build-gpu/tests/gpu/test_gpu
        BIN_BENCH=build-gpu/bench/llm/bench-llm
        BIN_BATCH=build-gpu/bench/llm/bench-batch
        MODE="built here"
    fi
fi
grep -E "CUDA backend|OpenBLAS|warning|error" "$TMP/build.log" | head -20
if [ -z "$MODE" ]; then
    tail -15 "$TMP/build.log"
    if [ -x "$PREBUILT/test_gpu" ]; then
        BIN_TEST=$PREBUILT/test_gpu
        BIN_BENCH=$PREBUILT/bench-llm
        BIN_BATCH=$PREBUILT/bench-batch
        MODE="prebuilt (no build dependencies here; $(head -1 "$PREBUILT/STAMP" 2>/dev/null || echo 'no stamp'))"
        # the module beside them (the path compiled into them is the preparing machine's)
        export CAIRN_CUDA_PLUGIN="$ROOT/$PREBUILT/libcairn-cuda.so"
        [ -f "$CAIRN_CUDA_PLUGIN" ] || echo "warning: $CAIRN_CUDA_PLUGIN missing (prepared before the module existed?)"
    else
        echo "build failed and no $PREBUILT: run 'tests/gpu/device-check.sh --prepare' before the lease and carry it"
    fi
fi
echo "binaries: ${MODE:-none}"

log "gpu tests"
TEST_STATUS="not run"
if [ "$MODE" = "built here" ]; then
    timeout 170 meson test -C build-gpu --suite gpu --verbose 2>&1 | tee "$TMP/meson-test.log"
    # the program's own TAP output (meson's verbose log shows only the parsed results)
    cp build-gpu/meson-logs/testlog.txt "$LOGS/test-gpu.log" 2>/dev/null
    grep -qE 'cairn:gpu / gpu +SKIP' "$TMP/meson-test.log" && echo "# SKIP (meson)" >>"$LOGS/test-gpu.log"
elif [ -n "$MODE" ]; then
    timeout 170 "$BIN_TEST" 2>&1 | tee "$LOGS/test-gpu.log"
fi
if [ -n "$MODE" ]; then
    n_ok=$(grep -cE '^ok [0-9]+' "$LOGS/test-gpu.log")
    n_bad=$(grep -cE '^not ok [0-9]+' "$LOGS/test-gpu.log")
    if grep -q '# SKIP' "$LOGS/test-gpu.log" && [ "$n_ok" -eq 0 ]; then
        TEST_STATUS="SKIPPED ($(grep -m1 -oE '1\.\.0 # SKIP.*' "$LOGS/test-gpu.log"))"
    elif [ "$n_bad" -eq 0 ] && [ "$n_ok" -gt 0 ] && grep -qE '^1\.\.[0-9]+' "$LOGS/test-gpu.log"; then
        TEST_STATUS="PASS ($n_ok ok)"
    else
        TEST_STATUS="FAIL ($n_ok ok, $n_bad not ok)"
        grep -E '^not ok' "$LOGS/test-gpu.log" | head -20
    fi
fi
echo "gpu tests: $TEST_STATUS"
# on a failure, the quick cases once more under each decode setting that can be turned off:
# which one the failure follows says where to look (gpu/cuda/kernels_gemv.cuh: gemv_kernel;
# kernels_common.cuh: pdl_wait)
ISOLATE=""
if [[ $TEST_STATUS == FAIL* ]]; then
    for v in "" CAIRN_CUDA_PDL=0 CAIRN_CUDA_GEMV=cublas; do
        lg="$TMP/isolate-${v:-default}.log"
        env $v CAIRN_TEST_QUICK=1 timeout 60 "$BIN_TEST" >"$lg" 2>&1
        line="quick cases ${v:-as built}: $(grep -cE '^ok [0-9]+' "$lg") ok, $(grep -cE '^not ok [0-9]+' "$lg") not ok"
        echo "$line"
        ISOLATE="$ISOLATE$line"$'\n'
    done
fi

log "compute-sanitizer memcheck and racecheck (quick cases)"
SAN_STATUS="not run"
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -n "$MODE" ] && [ -n "$SAN" ]; then
    SAN_STATUS=""
    tools="memcheck racecheck"
    [ $SHORT = 1 ] && tools=memcheck
    for tool in $tools; do
        echo "\$ compute-sanitizer --tool $tool" >>"$LOGS/sanitizer.log"
        CAIRN_TEST_QUICK=1 timeout 90 "$SAN" --tool $tool --error-exitcode 9 "$BIN_TEST" \
            >>"$LOGS/sanitizer.log" 2>&1
        rc=$?
        tail -4 "$LOGS/sanitizer.log"
        case $rc in
        0) st="clean" ;;
        9) st="ERRORS (see sanitizer.log)" ;;
        124) st="timed out" ;;
        *) st="exit $rc" ;;
        esac
        SAN_STATUS="$SAN_STATUS$tool $st; "
    done
fi
echo "sanitizer: $SAN_STATUS"

log "CUDA module loader (cuda-plugin test)"
PLUGIN_STATUS="not run (prebuilt binaries only)"
if [ "$MODE" = "built here" ]; then
    timeout 45 meson test -C build-gpu cuda-plugin --verbose >"$TMP/plugin.log" 2>&1
    grep -E 'GPU|without a GPU|auto with the real|not ok' "$TMP/plugin.log" | head -8
    if grep -qE 'cuda-plugin +OK' "$TMP/plugin.log"; then
        PLUGIN_STATUS="PASS"
    else
        PLUGIN_STATUS="FAIL (see plugin.log)"
    fi
fi
echo "cuda-plugin: $PLUGIN_STATUS"


log "the command line on the GPU (cairn generate --backend cuda, against --backend cpu)"
# the CLI as a user runs it: the module loaded through dlopen, a model file read from disk, text
# streamed; greedy, so the two texts should match (random weights can have near-ties, so a
# difference is reported, not failed)
CLI_STATUS="not run"
if [ -n "$MODE" ] && [ $SHORT = 0 ]; then
    if [ "$MODE" = "built here" ]; then
        CAIRN=build-gpu/cairn MKMODEL=build-gpu/tests/model/cairn-mkmodel
    else
        CAIRN=$PREBUILT/cairn MKMODEL=$PREBUILT/cairn-mkmodel
        export LD_LIBRARY_PATH="$ROOT/$PREBUILT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    if [ -x "$CAIRN" ] && [ -x "$MKMODEL" ]; then
        m=$TMP/cli-110m-f16.gguf
        "$MKMODEL" "$m" --dim 768 --layers 12 --heads 12 --kv-heads 12 --ff 2048 --vocab 32000 \
            --type f16 >/dev/null 2>&1
        {
            timeout 30 "$CAIRN" model-info "$m" 2>&1 | head -12
            for bk in cuda cpu; do
                echo "\$ cairn generate --backend $bk"
                timeout 60 "$CAIRN" generate -m "$m" -p "the quick brown fox" -n 48 --temperature 0 \
                    --ignore-eos --backend $bk >"$TMP/gen-$bk.txt" 2>"$TMP/gen-$bk.err"
                echo "exit $?"
                cat "$TMP/gen-$bk.err"
            done
        } >"$LOGS/cli.txt" 2>&1
        cat "$LOGS/cli.txt"
        if grep -q '^exit 0' <(sed -n '/backend cuda/,/backend cpu/p' "$LOGS/cli.txt") && [ -s "$TMP/gen-cuda.txt" ]; then
            if cmp -s "$TMP/gen-cuda.txt" "$TMP/gen-cpu.txt"; then
                CLI_STATUS="PASS (cuda text = cpu text, $(wc -c <"$TMP/gen-cuda.txt") bytes)"
            else
                CLI_STATUS="PASS (ran; texts differ from byte $(cmp "$TMP/gen-cuda.txt" "$TMP/gen-cpu.txt" | grep -oE 'byte [0-9]+' | cut -d' ' -f2))"
            fi
        else
            CLI_STATUS="FAIL (see cli.txt)"
        fi
    else
        CLI_STATUS="not run (no cairn binary: prepared before it was bundled?)"
    fi
fi
echo "cli: $CLI_STATUS"

log "the main job on the GPU (scripts/quickstart.sh's pipeline, generate.backend cuda)"
# retrieve -> generate (on the GPU) -> postprocess -> notify (a real webhook receiver on
# 127.0.0.1), then the same task again: nothing generated or sent twice
JOB_STATUS="not run"
JOB_BACKEND=${CAIRN_CHECK_JOB_BACKEND:-cuda} # "cpu" checks this step on a machine without a GPU
if [ -n "$MODE" ] && [ $SHORT = 0 ] && [ -x "${CAIRN:-}" ] && command -v python3 >/dev/null; then
    job=$TMP/job
    mkdir -p "$job"
    (
        set -e
        cd "$job"
        cp "$ROOT/examples/pipeline/corpus.jsonl" "$ROOT/examples/pipeline/task.json" .
        export CAIRN_STORE="$job/store" CAIRN_WEBHOOK_SECRET="whsec_$(head -c 32 /dev/urandom | base64)"
        "$ROOT/$MKMODEL" demo.gguf >/dev/null
        "$ROOT/$CAIRN" index --corpus corpus.jsonl
        python3 "$ROOT/tests/notify/receiver.py" received.jsonl >port.txt &
        rp=$!
        trap 'kill $rp 2>/dev/null' EXIT
        for _ in $(seq 50); do [ -s port.txt ] && break; sleep 0.1; done
        sed -e "s/@PORT@/$(head -1 port.txt)/" -e "s/\"model\": \"demo.gguf\",/\"model\": \"demo.gguf\", \"backend\": \"$JOB_BACKEND\",/" \
            "$ROOT/examples/pipeline/config.json" >config.json
        export CAIRN_CONFIG="$job/config.json"
        echo "\$ cairn run (first)"
        timeout 60 "$ROOT/$CAIRN" run --graph default --task-from tenant,product_id --input task.json
        timeout 30 "$ROOT/$CAIRN" show acme_mug-350
        echo "\$ cairn run (again)"
        timeout 60 "$ROOT/$CAIRN" run --graph default --task-from tenant,product_id --input task.json
        echo "deliveries received: $(wc -l <received.jsonl)"
    ) >>"$LOGS/cli.txt" 2>&1
    rc=$?
    tail -25 "$LOGS/cli.txt"
    n=$(grep -oE 'deliveries received: [0-9]+' "$LOGS/cli.txt" | grep -oE '[0-9]+$')
    if [ $rc -eq 0 ] && [ "${n:-0}" = 1 ] && grep -q "\"backend\": \"$JOB_BACKEND\"" "$job/config.json"; then
        JOB_STATUS="PASS (generated on $JOB_BACKEND, one delivery after two runs)"
    else
        JOB_STATUS="FAIL (exit $rc, ${n:-no} deliveries; see cli.txt)"
    fi
fi
echo "main job: $JOB_STATUS"

log "bench-llm"
: >"$LOGS/bench.txt"
if [ -n "$MODE" ]; then
    run_bench() { # limit args...; appends the table rows
        local limit=$1
        shift
        echo "\$ bench-llm $*" | tee -a "$LOGS/bench.log"
        timeout "$limit" "$BIN_BENCH" "$@" 2>&1 | tee -a "$LOGS/bench.log" | tee "$TMP/b.out"
        grep -E '^bench-llm: (cpu|cuda):' "$TMP/b.out" >>"$TMP/bench.hdr"
        if [ -n "${LABEL:-}" ]; then # a variant of the cuda rows: those only, renamed
            grep -E '^cuda ' "$TMP/b.out" | sed -E "s/^cuda /$LABEL /" >>"$LOGS/bench.txt"
        else
            grep -E "^(cpu|cuda|cublas) |decode: cairn's kernel|decode at position" "$TMP/b.out" >>"$LOGS/bench.txt"
        fi
        grep -E '^back ' "$TMP/b.out" | head -1 >"$TMP/bench.cols"
    }
    : >"$TMP/bench.hdr"
    # the GPU rows first (the ones the lease is for), the CPU peer row last
    run_bench 80 --sizes 1B --types F16 --backend cuda --prompt 128 --gen 128
    # batched decoding on the GPU: the sweep at 1..32 sequences, then the 110M shape with the
    # non-invariant cuBLAS opt-in against the same rows without it (whole output in bench.log,
    # the rows in the summary: the lease returns at most 8 files, and there are 8 already)
    : >"$TMP/batch.txt"
    if [ -x "$BIN_BATCH" ]; then
        echo "\$ bench-batch --backend cuda --sizes 1B,110M --types F16" | tee -a "$TMP/batch.txt"
        timeout 150 "$BIN_BATCH" --backend cuda --sizes 1B,110M --types F16 --prompt 16 --gen 16 \
            --max-seqs 32 2>&1 | tee -a "$TMP/batch.txt"
        echo "\$ CAIRN_CUDA_BATCH_GEMM=2 bench-batch --backend cuda --sizes 110M --types F16" |
            tee -a "$TMP/batch.txt"
        CAIRN_CUDA_BATCH_GEMM=2 timeout 60 "$BIN_BATCH" --backend cuda --sizes 110M --types F16 \
            --prompt 16 --gen 16 --max-seqs 32 2>&1 | sed -E 's/^110M /110M+gemm /' |
            tee -a "$TMP/batch.txt"
    else
        echo "no bench-batch binary (prepared before it was bundled?)" | tee "$TMP/batch.txt"
    fi
    cat "$TMP/batch.txt" >>"$LOGS/bench.log"
    # Llama-3-8B's shape (16 GB of f16; most of its time is the host writing the model): the
    # full-size model, second, so that the call's limit cannot cut it
    run_bench 240 --sizes 8B --types F16 --backend cuda --prompt 128 --gen 64
    run_bench 80 --sizes 2B --types F16 --backend cuda --prompt 128 --gen 128
    [ $SHORT = 0 ] && run_bench 60 --sizes Q0.5B --types F16 --backend cuda --prompt 128 --gen 128
    # the 1.1B row with ordinary launches: what programmatic dependent launch gains
    [ $SHORT = 0 ] && CAIRN_CUDA_PDL=0 LABEL=nopdl run_bench 80 --sizes 1B --types F16 --backend cuda --prompt 128 --gen 128
    [ $SHORT = 0 ] && run_bench 50 --sizes 110M --types Q8_0,Q4_K --backend cuda --prompt 128 --gen 128
    # a long prompt with a float and a half KV cache (rows kv f32 / f16, and their ratio)
    [ $SHORT = 0 ] && run_bench 60 --sizes Q0.5B --types F16 --backend cuda --prompt 1024 --gen 64 --cache f32,f16
    # where a decode step's time goes: each operation timed with events (eager steps)
    echo "\$ CAIRN_CUDA_PROFILE=1 bench-llm --sizes 1B --types F16 --backend cuda" | tee "$LOGS/profile.log"
    CAIRN_CUDA_PROFILE=1 timeout 60 "$BIN_BENCH" --sizes 1B --types F16 --backend cuda --prompt 128 \
        --gen 16 >>"$LOGS/profile.log" 2>&1
    grep -A40 '^cuda profile: .*decode' "$LOGS/profile.log" | head -32
    # the 1.7B one's splits as timed at load, and its profile
    echo "### 2B F16, CAIRN_CUDA_PROFILE=1" | tee "$LOGS/sweep.txt"
    CAIRN_CUDA_PROFILE=1 timeout 60 "$BIN_BENCH" --sizes 2B --types F16 --backend cuda --prompt 16 \
        --gen 24 2>&1 | grep -A40 '^cuda gemv splits' | awk '/prompt chunks/{exit} 1' |
        grep -vE 'sort key|sample weights|cub::|sampling kernel' | head -40 | tee -a "$LOGS/sweep.txt"
    # last, the CPU peer row: if the call's limit cuts something, let it be this
    [ $SHORT = 0 ] && run_bench 60 --sizes 1B --types F16 --backend cpu --prompt 128 --gen 32
fi

log "summary ($(($(date +%s) - START)) s)"
{
    echo "binaries:  ${MODE:-none}"
    echo "gpu tests: $TEST_STATUS"
    echo "loader:    $PLUGIN_STATUS"
    echo "cli:       $CLI_STATUS"
    echo "main job:  $JOB_STATUS"
    echo "sanitizer: $SAN_STATUS"
    printf '%s' "$ISOLATE"
    grep -E 'max rel diff' "$LOGS/test-gpu.log" 2>/dev/null | sed 's/^# //' >"$TMP/diffs.txt"
    worst=$(grep -oE 'max rel diff [0-9.e+-]+' "$TMP/diffs.txt" | awk '{print $4}' | sort -g | tail -1)
    echo "logits vs cpu, largest max|d|/max|ref| over all cases: ${worst:-n/a} (each case in diffs.txt)"
    grep -E '(ok|not ok) [0-9]+ - (device sampler|engine on cuda, t )' "$LOGS/test-gpu.log" 2>/dev/null |
        sed -E 's/^(ok|not ok) [0-9]+ - /\1: /' # the device sampler, alone and through the engine
    grep -E '(ok|not ok) [0-9]+ - launch modes' "$LOGS/test-gpu.log" 2>/dev/null |
        sed -E 's/^(ok|not ok) [0-9]+ - /\1: /' # programmatic dependent launch: same bits, graphs
    grep -E '(ok|not ok) [0-9]+ - paged' "$LOGS/test-gpu.log" 2>/dev/null |
        sed -E 's/^(ok|not ok) [0-9]+ - /\1: /' # batch invariance, and the pool's exhaustion
    grep -E '^(bench-batch:|size|1B|110M|no bench-batch)' "$TMP/batch.txt" 2>/dev/null # the sweep
    sort -u "$TMP/bench.hdr" 2>/dev/null
    cat "$TMP/bench.cols" 2>/dev/null # bench-llm's own column header
    cat "$LOGS/bench.txt"
    grep -A5 '^cuda gemv splits' "$LOGS/profile.log" 2>/dev/null | head -6
    grep -A40 '^cuda profile: .*decode' "$LOGS/profile.log" 2>/dev/null | head -32
} | tee "$LOGS/summary.txt"
case $TEST_STATUS in
PASS*) exit 0 ;;
*) exit 1 ;;
esac
