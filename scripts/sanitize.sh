#!/usr/bin/env bash
# scripts/sanitize.sh [asan|tsan] - builds cairn with sanitizers and runs tests under them (both
# builds when no argument is given; CI runs this after the README's test command, see .ci/run):
#   build-asan: AddressSanitizer + UndefinedBehaviorSanitizer (and LeakSanitizer where it
#               works), running the unit, integration, crash and fuzz suites in their short
#               forms (the fuzz tests' time-bounded loops);
#   build-tsan: ThreadSanitizer, running the tests whose processes run threads of their own:
#               the lease heartbeat, the sync store's pin keeper, the CPU backend's thread pool.
# Any report fails: each sanitizer stops and aborts the process at its first report, and writes
# the report to BUILD/sanitizer-reports/ as well (not to stderr, which tests compare), so that a
# report from a child process whose exit status a test does not look at still fails the run:
# any report there is added to BUILD/meson-logs/testlog.json as one failed entry, which .ci/run
# counts with the tests. Exit status 0: every test passed and no report was written.
# Tests that cannot run under a sanitizer are excluded by name below, each with its reason; the
# plain build (scripts/test.sh) runs them.
# shellcheck disable=SC2046,SC2086 # test names and the files of a build are words of their own
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
only=${1:-}
case $only in "" | asan | tsan) ;; *) echo "usage: scripts/sanitize.sh [asan|tsan]" >&2; exit 64 ;; esac

# Not under ASan+UBSan (name: reason):
asan_skip=(
  "layering: checks the source's includes; no compiled code of ours runs"
  "layering-self: checks the include checker; no compiled code of ours runs"
  "format: checks the source's formatting; no compiled code of ours runs"
  "install: builds a program without ASan against the installed library, and ASan's runtime must be the first library a process loads"
  "powercut: its LD_PRELOAD shim loads before the ASan runtime, which ASan refuses"
)
# Under ASan+UBSan but without leak checks (name: reason):
asan_noleaks=(
  "campaign: a command that meets a damaged page abandons the store's LMDB environment on purpose (checkpoint/guard.c: LMDB is not to be trusted after the fault) and exits 74; LeakSanitizer reports what it abandoned"
  "pipeline_crash: it stops the runner with SIGSTOP and waits until it stops, but LeakSanitizer's check at exit holds the process under ptrace, so it never stops for its parent (a hang)"
)
# (gemv-emu, attention-emu and sample-emu are not built with b_sanitize set: tests/gpu/emu.)

# Under TSan: the tests with threads. Not synced: it forks children that open stores while the
# pin keeper thread runs, and TSan cannot track a thread made in such a child ("dup thread with
# used id"); the keeper runs under TSan in store, sigterm and pipeline.
tsan_tests=(runner semantics store model-engine sigterm pipeline)

# The sanitizers' settings: stop at the first report (halt_on_error), abort so the process dies of
# a signal no exit code of cairn's can be mistaken for (abort_on_error), full stacks.
report_opts() { echo "halt_on_error=1:abort_on_error=1:print_stacktrace=1:log_path=$1"; }

# setup DIR OPTION... : configures DIR once (reconfigures it after), without CUDA (no GPU code to
# sanitize; the CUDA emulator is not built with a sanitizer) and without the libFuzzer targets
# (built with their own -fsanitize=fuzzer,address by scripts/fuzz-store.sh and -Dfuzz). b_lundef=false: with clang the sanitizer runtime is linked into
# executables only, so shared libraries keep undefined references to it. No -Dwerror even in CI:
# the plain build refuses warnings, and with sanitizers gcc warns of paths it cannot rule out
# (test_bad_input.c: "'%s' directive argument is null").
setup() {
  local dir=$1
  shift
  local args=(-Dbuildtype=debugoptimized -Dcuda=disabled -Dfuzz=disabled -Db_lundef=false "$@")
  mkdir -p "$dir"
  if [ -f "$dir/build.ninja" ]; then
    meson setup --reconfigure "$dir" "${args[@]}" >"$dir/sanitize-setup.log" 2>&1
  else
    meson setup "$dir" "${args[@]}" >"$dir/sanitize-setup.log" 2>&1
  fi || { cat "$dir/sanitize-setup.log"; echo "sanitize: meson setup $dir failed"; return 1; }
}

# tests DIR [--targets] -s SUITE... | -n NAME... : the names of the tests to run, from meson's
# introspection: those in the suites given, or the names given, less those named in $SKIP (each
# of which must exist, so an exclusion cannot outlive its test). With --targets: the files ninja
# must build for them instead (the programs and their depends).
tests() {
  python3 - "$@" <<'PY'
import json, os, sys
d, *rest = sys.argv[1:]
want_targets = rest[:1] == ["--targets"]
mode, *rest = rest[1:] if want_targets else rest
skip = os.environ.get("SKIP", "").split()
tests = json.load(open(f"{d}/meson-info/intro-tests.json"))
targets = {t["id"]: t["filename"] for t in json.load(open(f"{d}/meson-info/intro-targets.json"))}
by_name = {t["name"]: t for t in tests}
missing = [n for n in skip + (rest if mode == "-n" else []) if n not in by_name]
if missing:
    sys.exit(f"sanitize: no such test in {d}: {' '.join(missing)}")
if mode == "-s":
    sel = [t for t in tests if any(s.split(":")[-1] in rest for s in t["suite"])]
else:
    sel = [by_name[n] for n in rest]
sel = [t for t in sel if t["name"] not in skip]
if not want_targets:
    print("\n".join(t["name"] for t in sel))
    sys.exit(0)
files = set()
for t in sel:
    for dep in t["depends"]:
        files.update(targets.get(dep, []))
print("\n".join(sorted(os.path.relpath(f, d) for f in files)))
PY
}

# names LIST... : the test names of "name: reason" entries
names() { printf '%s\n' "$@" | cut -d: -f1; }

# mtest DIR LOGBASE NAME... : runs the tests into DIR/meson-logs/LOGBASE.json
mtest() {
  local dir=$1 base=$2
  shift 2
  rm -f "$dir/meson-logs/$base.json"
  [ $# -eq 0 ] || meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes 2 \
    --logbase "$base" "$@"
}

# reports DIR : turns any report left in DIR/sanitizer-reports into a failed entry of the test
# log; 1 if there was one
reports() {
  python3 - "$1" <<'PY'
import glob, json, os, sys
d = sys.argv[1]
reports = sorted(glob.glob(f"{d}/sanitizer-reports/*"))
if not reports:
    sys.exit(0)
text = "".join(f"--- {r}\n" + open(r, errors="replace").read() for r in reports)
print(text)
with open(f"{d}/meson-logs/testlog.json", "a") as log:
    log.write(json.dumps({"name": f"{os.path.basename(d)}: sanitizer reports",
                          "result": "FAIL", "stdout": text}) + "\n")
print(f"sanitize: {len(reports)} sanitizer report(s) in {d}/sanitizer-reports")
sys.exit(1)
PY
}

status=0

if [ -z "$only" ] || [ "$only" = asan ]; then
  d=build-asan
  rm -f $d/meson-logs/testlog.json $d/meson-logs/noleaks.json # no old results if the build fails
  if setup $d -Db_sanitize=address,undefined && nice ninja -C $d >$d/sanitize-build.log 2>&1 \
    && main=$(SKIP="$(names "${asan_skip[@]}" "${asan_noleaks[@]}")" tests $d -s unit integration crash fuzz) \
    && noleaks=$(tests $d -n $(names "${asan_noleaks[@]}")); then
    rm -rf $d/sanitizer-reports && mkdir -p $d/sanitizer-reports
    # LeakSanitizer cannot work under ptrace (a debugger, some containers): then leaks go unchecked
    leaks=1
    if ASAN_OPTIONS=detect_leaks=1 $d/cairn --version 2>&1 >/dev/null \
      | grep -q "LeakSanitizer has encountered a fatal error"; then
      leaks=0
      echo "sanitize: LeakSanitizer does not work here: leaks are not checked"
    fi
    printf 'sanitize: not under ASan: %s\n' "${asan_skip[@]}"
    printf 'sanitize: without leak checks: %s\n' "${asan_noleaks[@]}"
    export UBSAN_OPTIONS
    UBSAN_OPTIONS=$(report_opts "$PWD/$d/sanitizer-reports/ubsan")
    # allow_user_segv_handler: the store's fault guard (checkpoint/guard.c) turns a fault on a
    # damaged page into exit 74, and passes every other fault on to ASan's handler
    asan="$(report_opts "$PWD/$d/sanitizer-reports/asan"):allow_user_segv_handler=1"
    # detect_stack_use_after_return: a group-commit leader that touched a woken writer's
    # request (on that writer's stack, maybe gone) passed every test without it
    asan="$asan:detect_stack_use_after_return=1"
    ASAN_OPTIONS="$asan:detect_leaks=$leaks" mtest $d testlog $main || status=1
    ASAN_OPTIONS="$asan:detect_leaks=0" mtest $d noleaks $noleaks || status=1
    cat $d/meson-logs/noleaks.json >>$d/meson-logs/testlog.json 2>/dev/null
    reports $d || status=1
  else
    tail -30 $d/sanitize-build.log 2>/dev/null
    echo "sanitize: the ASan build failed"
    status=1
  fi
fi

if [ -z "$only" ] || [ "$only" = tsan ]; then
  d=build-tsan
  rm -f $d/meson-logs/testlog.json
  # OpenBLAS off: its threads are not instrumented, so TSan would report its own work as races
  # (the prompt's products then run on cairn's thread pool, which is what is to be checked).
  # Only what the tests need is built.
  if setup $d -Db_sanitize=thread -Dopenblas=disabled \
    && files=$(tests $d --targets -n "${tsan_tests[@]}") \
    && nice ninja -C $d $files >$d/sanitize-build.log 2>&1; then
    rm -rf $d/sanitizer-reports && mkdir -p $d/sanitizer-reports
    # die_after_fork=0: a runner forks step children while a thread of its own may run (the pin
    # keeper), and a child may start threads (the thread pool); glibc supports that, TSan by
    # default refuses it
    TSAN_OPTIONS="$(report_opts "$PWD/$d/sanitizer-reports/tsan"):die_after_fork=0:second_deadlock_stack=1" \
      mtest $d testlog "${tsan_tests[@]}" || status=1
    reports $d || status=1
  else
    tail -30 $d/sanitize-build.log 2>/dev/null
    echo "sanitize: the TSan build failed"
    status=1
  fi
fi
exit $status
