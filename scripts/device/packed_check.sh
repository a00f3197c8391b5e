#!/usr/bin/env bash
# One device call for packed batching (issue 14): the GPU tests, the flash-preset release, then one
# server per build (bin/ = this tree, before/ = the previous main, both in .devcarry/pkg.tar.xz) and
# `clefserve bench` over public231-shape at concurrency 1, 4, 16, 64 and over public231-short (its
# items under 600 tokens) at 16 and 64, with the /metrics batch counters of each run (deltas: mean
# requests and tokens per forward, the requests-per-batch histogram); last the in-process profile
# (e2e and GEMM floor, which gives the GEMM-bound ceiling). Logs under $OUT; the summary comes last.
# Usage (repo root on the device): STEPS="tests model after before profile" scripts/device/packed_check.sh
set -uo pipefail
STEPS="${STEPS:-tests model after before profile}"
source scripts/device/setup.sh > /dev/null
M=/tmp/flash
L=$OUT
PORT=8731
has() { [[ " $STEPS " == *" $1 "* ]]; }
summary=()

if has tests; then
  timeout 300 test_gpu --gtest_brief=1 --gtest_filter="${GTEST_FILTER:--GdnTiming*}" > "$L/test_gpu.log" 2>&1
  summary+=("test_gpu: rc $? :: $(grep -E '^\[  (PASSED|FAILED)' "$L/test_gpu.log" | tr '\n' ' ')")
  while read -r l; do summary+=("  $l"); done < <(grep -E "FAILED|max \|dp\|" "$L/test_gpu.log" | head -16)
fi

if has model; then
  t0=$(date +%s)
  make_release flash "$M" "$L/misc.log"
  summary+=("model: flash ready ($(( $(date +%s) - t0 )) s)")
fi

metrics() { curl -s http://127.0.0.1:$PORT/metrics | grep -E "^clef_batch(es_total|_size_requests|_size_tokens)" > "$1"; }

# bench NAME MANIFEST C TRAVERSALS: one campaign, its numbers and the batch counters' deltas.
bench() {
  local name=$1 manifest=$2 c=$3 trav=$4
  metrics /tmp/m0.txt
  timeout 200 clefserve bench --url http://127.0.0.1:$PORT --manifest "$manifest" \
    --concurrency "$c" --warmup "$c" --traversals "$trav" --out "/tmp/bench_$name" >> "$L/bench_$who.log" 2>&1
  local rc=$?
  metrics /tmp/m1.txt
  summary+=("$who $name: rc $rc :: $(python3 - "$name" <<'PY' 2>&1
import json, re, sys
r = json.load(open(f"/tmp/bench_{sys.argv[1]}/report.json"))
l = r.get("successful_latency_ms", {}); t = r.get("throughput", {})
def read(p):
    d = {}
    for line in open(p):
        k, v = line.rsplit(" ", 1); d[k] = float(v)
    return d
a, b = read("/tmp/m0.txt"), read("/tmp/m1.txt")
dd = {k: b[k] - a.get(k, 0) for k in b}
n = dd.get("clef_batches_total", 0) or 1
mean_req = dd.get("clef_batch_size_requests_sum", 0) / n
mean_tok = dd.get("clef_batch_size_tokens_sum", 0) / n
hist = {re.search(r'le="([^"]+)"', k).group(1): int(v) for k, v in dd.items() if k.startswith("clef_batch_size_requests_bucket")}
print("req/s %.2f, p50 %.1f ms, p95 %.1f ms, failures %s :: forwards %d, mean %.2f req / %.0f tokens per forward, requests-per-forward cumulative histogram %s" % (
    t.get("requests_per_s") or 0, l.get("p50") or 0, l.get("p95") or 0, json.dumps(r.get("failures")),
    n, mean_req, mean_tok, json.dumps(hist)))
PY
)")
}

campaign() {  # campaign WHO BINARY C-LIST SHORT-C-LIST
  who=$1
  local bin=$2
  rm -rf /tmp/tc_$who
  local t0=$(date +%s)
  $bin serve --model $M --device cuda --port $PORT --tuning-cache /tmp/tc_$who > "$L/serve_$who.log" 2>&1 &
  SP=$!
  for i in $(seq 1 600); do curl -sf http://127.0.0.1:$PORT/health > /dev/null && break; kill -0 $SP 2>/dev/null || break; sleep 0.5; done
  summary+=("$who: /health after $(( $(date +%s) - t0 )) s :: $(grep -E 'graphs' "$L/serve_$who.log" | tail -1)")
  for c in $3; do
    local trav=2; [ "$c" -ge 16 ] && trav=3
    bench "p231_c$c" manifests/public231-shape.jsonl "$c" "$trav"
  done
  for c in $4; do bench "short_c$c" manifests/public231-short.jsonl "$c" 4; done
  kill $SP; wait $SP 2>/dev/null
}

has after && campaign after clefserve "1 4 16 64" "16 64"
has before && campaign before /tmp/c/before/clefserve "1 16 64" "64"

if has profile; then
  timeout 200 clefserve profile --model $M --device cuda --lengths "${LENGTHS:-361,961,5661,16384}" --runs 5 \
    > "$L/profile.txt" 2>>"$L/misc.log"
  summary+=("profile rc $?")
fi

print_summary
[ -f "$L/profile.txt" ] && cat "$L/profile.txt"
