#!/bin/sh
# soak.sh - the long crash soak: thousands of SIGKILLs spread over every phase of the ledger
# graph (tests/crash/test_soak.c, suite soak-long), with the phase histogram printed.
#
#   scripts/soak.sh [KILLS] [SEED]
#
# KILLS defaults to 2000 (about 2 minutes on an idle 2-core machine; the default test suite
# runs 300 of them), SEED to a fresh one each time (printed, so a failure can be replayed with
# the same schedule). BUILD names the build directory (default ./build). CAIRN_TEST_KEEP=1 keeps
# the store and files afterwards.
set -eu
exec sh "$(dirname "$0")/long_run.sh" soak soak-long CAIRN_SOAK_LONG_KILLS CAIRN_SOAK_SEED \
    "${1:-2000}" ${2:+"$2"}
