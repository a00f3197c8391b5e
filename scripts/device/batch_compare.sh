#!/usr/bin/env bash
# Served throughput at concurrency C (default 16) over public231-shape for two builds in one call:
# before/ and bin/ inside .devcarry/pkg.tar.xz, each `serve`d on the flash preset (bf16, cold start,
# no tuning cache shared between them), then `clefserve bench --concurrency C` (warm-up, 2
# traversals); prints requests/s, latency p50/p95 and the /metrics batch counters per build.
# Usage (repo root on the device): C=16 scripts/device/batch_compare.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
M=/tmp/flash
L=$OUT
C=${C:-16}
PORT=8731
summary=()
make_release flash "$M" "$L/misc.log"
for who in before after; do
  bin=clefserve; [ $who = before ] && bin=/tmp/c/before/clefserve
  rm -rf /tmp/tc_$who
  $bin serve --model $M --device cuda --port $PORT --tuning-cache /tmp/tc_$who > "$L/serve_$who.log" 2>&1 &
  SP=$!
  for i in $(seq 1 600); do curl -sf http://127.0.0.1:$PORT/health > /dev/null && break; kill -0 $SP 2>/dev/null || break; sleep 0.5; done
  timeout 240 clefserve bench --url http://127.0.0.1:$PORT --manifest manifests/public231-shape.jsonl \
    --concurrency $C --warmup $C --traversals ${TRAV:-2} --out /tmp/bench_$who > "$L/bench_$who.log" 2>&1
  rc=$?
  curl -s http://127.0.0.1:$PORT/metrics | grep -E "^clef_batches_total|^clef_batch_size_requests_(sum|count)" > /tmp/metrics_$who.txt
  kill $SP; wait $SP 2>/dev/null
  summary+=("$who C$C: bench rc $rc :: $(python3 -c "
import json; r = json.load(open('/tmp/bench_$who/report.json'))
l = r.get('successful_latency_ms', {}); t = r.get('throughput', {})
print('req/s %.2f, p50 %.1f ms, p95 %.1f ms, failures %s' % (t.get('requests_per_s') or 0, l.get('p50') or 0, l.get('p95') or 0, json.dumps(r.get('failures'))))" 2>&1) :: $(tr '\n' ' ' < /tmp/metrics_$who.txt)")
done
print_summary
