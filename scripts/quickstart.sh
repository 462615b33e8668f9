#!/usr/bin/env bash
# Installs the dependencies, builds cairn and runs the main job on the sample input:
# a task through the example graph `ledger` (parse -> work -> append), then shows it, runs it
# again (nothing re-runs: exit 0, "already succeeded") and prints the ledger it wrote once.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
work=$(mktemp -d /tmp/cairn-demo.XXXXXX)
sed -e "s#@DIR@#$work#g" examples/ledger/sample.json > "$work/task.json"
L=build/examples/ledger/cairn-ledger
export CAIRN_STORE="$work/store"
echo "== cairn-ledger run (store $CAIRN_STORE)"
$L run --graph ledger --task order-1001 --input "$work/task.json"
echo "== the same task again: nothing is redone"
$L run --graph ledger --task order-1001 --input "$work/task.json"
echo "== cairn-ledger show order-1001"
$L show order-1001
echo "== the ledger (one line, however often the task runs)"
cat "$work/ledger.txt"
