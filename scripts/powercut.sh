#!/bin/sh
# powercut.sh - the long power-cut run: many cuts of a concurrent ledger + pipe workload against
# a modelled disk (tests/crash/test_powercut.c, suite powercut-long), with the totals printed:
# how many cuts left unflushed pages, how many reboots discarded relaxed commits, violations.
#
#   scripts/powercut.sh [CUTS] [SEED]
#
# CUTS defaults to 300 (about 4 minutes on an idle 2-core machine; the default test suite runs
# 30), SEED to a fresh one each time (printed; the moments of the cuts also depend on timing,
# so a replay is close, not exact). BUILD names the build directory (default ./build).
# CAIRN_TEST_KEEP=1 keeps every cut's directory; a failing cut's is always kept, and named in
# the report. The passing cuts' own lines are left out of the report.
set -eu
REPORT_SKIP='^(ok [0-9]+ - cut |# +failed at )' \
    exec sh "$(dirname "$0")/long_run.sh" powercut powercut-long CAIRN_POWERCUT_LONG_CUTS \
    CAIRN_POWERCUT_SEED "${1:-300}" ${2:+"$2"}
