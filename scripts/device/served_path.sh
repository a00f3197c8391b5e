#!/usr/bin/env bash
# One device call for the served path: GPU tests, the flash-preset release, `serve` cold
# (no tuning cache) and warm (cache from the cold start) with their start-up times, the C1 bench over
# public231-shape (5 warm-up, 3 traversals) with Server-Timing overhead per traversal, a Python
# http.client keep-alive check, and the in-process profile at 400 and 4925 tokens. Logs under $OUT
# (at most 8 files); the summary comes last.
# Usage (repo root on the device): STEPS="tests model cold bench warm profile" scripts/device/served_path.sh
set -uo pipefail
STEPS="${STEPS:-tests model cold bench warm profile}"
source scripts/device/setup.sh
M=/tmp/flash
TC=/tmp/tuning-cache
L=$OUT
PORT=8731
has() { [[ " $STEPS " == *" $1 "* ]]; }
summary=()

if has tests; then
  timeout 300 test_gpu --gtest_brief=1 --gtest_filter="${GTEST_FILTER:--GdnTiming*}" > "$L/test_gpu.log" 2>&1
  summary+=("test_gpu: rc $? :: $(grep -E '^\[  (PASSED|FAILED)' "$L/test_gpu.log" | tr '\n' ' ')")
  grep -E "FAILED|tuning .* cold" "$L/test_gpu.log" | head -12
fi

if has model; then
  t0=$(date +%s)
  clefserve make-model --preset flash --force --out $M --tokenizer tests/golden/tokenizers/qwen3 > "$L/misc.log" 2>&1
  summary+=("model: make-model --preset flash rc $? ($(( $(date +%s) - t0 )) s)")
fi

# serve NAME CACHE: starts the server, waits for /health 200, records the seconds, saves /health.
serve() {
  local name=$1
  local t0=$(date +%s.%N)
  clefserve serve --model $M --device cuda --port $PORT --tuning-cache "$2" --log-format json \
    --revision make-model-flash-seed0 \
    > "$L/serve_$name.log" 2>&1 &
  SP=$!
  for i in $(seq 1 600); do
    curl -sf http://127.0.0.1:$PORT/health > /tmp/health_$name.json 2>/dev/null && break
    kill -0 $SP 2>/dev/null || break
    sleep 0.5
  done
  local t1=$(date +%s.%N)
  summary+=("serve $name: /health 200 after $(python3 -c "print(round($t1 - $t0, 1))") s from spawn :: $(python3 -c "
import json; h = json.load(open('/tmp/health_$name.json')); print(json.dumps(h.get('startup')), json.dumps(h.get('gpu')))" 2>&1)")
}
stop() { kill $SP 2>/dev/null; wait $SP 2>/dev/null; }

if has cold; then
  rm -rf $TC
  serve cold $TC
  if has bench; then
    timeout 300 clefserve bench --url http://127.0.0.1:$PORT --manifest manifests/public231-shape.jsonl \
      --concurrency 1 --warmup 5 --traversals 3 --out /tmp/bench > "$L/bench.log" 2>&1
    summary+=("bench rc $?")
    cp /tmp/bench/report.md "$L/bench_report.md" 2>/dev/null
    python3 - <<'PY' >> "$L/bench.log" 2>&1
import json
r = json.load(open("/tmp/bench/report.json"))
def g(d, *k):
    for x in k: d = d.get(x, {}) if isinstance(d, dict) else {}
    return d
print("SUMMARY latency", json.dumps({k: r.get("successful_latency_ms", {}).get(k) for k in ("p50", "p95", "mean", "max")}))
for t in r.get("latency_by_traversal", []): print("SUMMARY traversal", json.dumps(t))
print("SUMMARY overhead_ms", json.dumps(r.get("overhead_ms")))
print("SUMMARY server_total_ms", json.dumps(r.get("server_total_ms")))
print("SUMMARY failures", json.dumps(r.get("failures")), "evidence_complete", r.get("evidence_complete"), r.get("evidence_missing"))
PY
    while read -r l; do summary+=("$l"); done < <(grep "^SUMMARY" "$L/bench.log")
    # Python http.client (one segment per request), keep-alive, one 307-token-class request x 30.
    python3 - <<'PY' 2>&1 | tee -a "$L/bench.log" | grep SUMMARY > /tmp/py.txt
import http.client, json, time, statistics
req = json.dumps({"model": "m", "state": " ".join(f"word{i % 97} fact{i}" for i in range(100)),
                  "questions": {"q": {"type": "noul", "instructions": "Is it fine?"}}})
c = http.client.HTTPConnection("127.0.0.1", 8731)
rt, st = [], []
for i in range(33):
    t0 = time.perf_counter(); c.request("POST", "/v1/systemone", req, {"Content-Type": "application/json"})
    r = c.getresponse(); body = r.read(); ms = (time.perf_counter() - t0) * 1e3
    tot = [float(x.split("dur=")[1]) for x in r.getheader("Server-Timing", "").split(",") if x.strip().startswith("total")]
    if i >= 3: rt.append(ms); st.append(ms - tot[0])
print(f"SUMMARY python http.client keep-alive: {json.loads(body)['usage']['input_tokens']} tokens, round trip p50 {statistics.median(rt):.2f} ms, minus Server-Timing total p50 {statistics.median(st):.2f} ms")
PY
    while read -r l; do summary+=("$l"); done < /tmp/py.txt
  fi
  stop
fi

if has warm; then
  serve warm $TC
  stop
  ls -la $TC >> "$L/misc.log" 2>&1
fi

if has profile; then
  timeout 240 clefserve profile --model $M --device cuda --lengths "${LENGTHS:-400,4925}" --runs 10 \
    > "$L/profile.txt" 2>>"$L/misc.log"
  summary+=("profile rc $?")
fi

print_summary
[ -f "$L/profile.txt" ] && cat "$L/profile.txt"
