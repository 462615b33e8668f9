#!/usr/bin/env bash
# The main job, on a fresh Debian 12 machine: installs the dependencies, builds cairn, makes a
# small demo model (random weights: its text is noise), indexes a sample corpus of product
# facts, starts a local webhook receiver (stopped again at the end), and runs a sample task
# through the built-in pipeline: retrieve -> generate -> postprocess -> notify. Then it runs the
# same task again to show that nothing is redone or resent.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bash scripts/install-deps.sh
bash scripts/build.sh

work=$(mktemp -d /tmp/cairn-demo.XXXXXX)
receiver_pid=""
cleanup() { [ -n "$receiver_pid" ] && kill "$receiver_pid" 2>/dev/null; true; }
trap cleanup EXIT

C="$root/build/cairn"
cd "$work"
cp "$root/examples/pipeline/corpus.jsonl" "$root/examples/pipeline/task.json" .
export CAIRN_STORE="$work/store"
export CAIRN_WEBHOOK_SECRET="whsec_$(head -c 32 /dev/urandom | base64)"

echo "== 1. a demo model (random weights; for real text set \"model\" to a GGUF such as a"
echo "      SmolLM2 or Qwen2.5 instruct file)"
"$root/build/tests/model/cairn-mkmodel" demo.gguf

echo "== 2. index the sample corpus (BM25, in the store's index/)"
"$C" index --corpus corpus.jsonl

echo "== 3. a local webhook receiver on 127.0.0.1 (verifies the Standard Webhooks signature)"
/usr/bin/env python3 "$root/tests/notify/receiver.py" received.jsonl > port.txt &
receiver_pid=$!
for _ in $(seq 50); do [ -s port.txt ] && break; sleep 0.1; done
port=$(head -1 port.txt)
sed -e "s/@PORT@/$port/" "$root/examples/pipeline/config.json" > config.json
export CAIRN_CONFIG="$work/config.json"

echo "== 4. cairn run: the task ID comes from the business fields tenant and product_id"
"$C" run --graph default --task-from tenant,product_id --input task.json
"$C" show acme_mug-350

echo "== 5. what the receiver got"
/usr/bin/env python3 - received.jsonl <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    h = r["headers"]
    print("POST %s  webhook-id %s  signature valid: %s" % (r["path"], h.get("webhook-id"), r["sig_valid"]))
    print(json.dumps(json.loads(r["body"]), ensure_ascii=False, indent=2)[:1200])
PY

echo "== 6. the same task again (a retry storm): nothing is generated or sent again"
"$C" run --graph default --task-from tenant,product_id --input task.json
echo "deliveries received: $(wc -l < received.jsonl)"
echo "outbox: $(ls outbox)"
echo
echo "Everything is in $work (store, config, outbox)."
