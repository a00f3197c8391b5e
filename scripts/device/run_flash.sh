#!/usr/bin/env bash
# One full device call: GPU tests, flash-preset release (make-model, or the Python fallback),
# HF load check + backbone parity vs transformers, CUDA bf16 vs CPU fp32 probabilities, the profile table,
# and (STEPS containing "bench") a C1 bench run. Logs under $OUT; the short table comes last.
# Usage (from the repo root on the device): STEPS="tests model parity probs profile bench" scripts/device/run_flash.sh
set -uo pipefail
STEPS="${STEPS:-tests model profile parity bench probs}"
source scripts/device/setup.sh
M=/tmp/flash
L=$OUT  # at most 8 files come back: keep to the names below
has() { [[ " $STEPS " == *" $1 "* ]]; }
summary=()

if has tests; then
  test_gpu --gtest_brief=1 > "$L/test_gpu.log" 2>&1
  summary+=("test_gpu (all tests of label gpu): rc $? :: $(grep -E '^\[  (PASSED|FAILED)' "$L/test_gpu.log" | tr '\n' ' ')")
  grep -E "^tiny|^T=|max \|dp\|" "$L/test_gpu.log" | head -20
fi

if has model; then
  t0=$(date +%s)
  # --force: a warm machine keeps /tmp/flash from the previous call
  if clefserve make-model --preset flash --force --out $M --tokenizer tests/golden/tokenizers/qwen3 > "$L/misc.log" 2>&1; then
    summary+=("model: clefserve make-model --preset flash ($(( $(date +%s) - t0 )) s)")
  else
    tail -3 "$L/misc.log"
    rm -rf $M
    python3 scripts/device/make_flash.py $M 0 >> "$L/misc.log" 2>&1
    summary+=("model: make-model unavailable, scripts/device/make_flash.py fallback ($(( $(date +%s) - t0 )) s)")
  fi
  tail -2 "$L/misc.log"; du -sh $M
fi





if has profile; then
  timeout 200 clefserve profile --model $M --device cuda --runs "${RUNS:-10}" --json "$L/profile_bf16.json" > "$L/profile_bf16.txt" 2>>"$L/misc.log"
  summary+=("profile rc $?")
fi

if has parity; then
  python3 -c "import random; random.seed(1); print(' '.join(str(random.randrange(151643)) for _ in range(777)))" > /tmp/ids.txt
  clefserve profile --model $M --dump-hidden /tmp/h_bf16.f32 --ids /tmp/ids.txt > "$L/parity.log" 2>&1
  clefserve profile --model $M --dtype float32 --dump-hidden /tmp/h_f32.f32 --ids /tmp/ids.txt >> "$L/parity.log" 2>&1
  PYTHONUNBUFFERED=1 python3 scripts/device/hf_parity.py $M /tmp/ids.txt /tmp/h_bf16.f32 /tmp/h_f32.f32 >> "$L/parity.log" 2>&1
  grep -E "HF check|PARITY|Error|error" "$L/parity.log" | head -8
  summary+=("$(grep -E 'HF check' "$L/parity.log" | cut -c1-120)")
  while read -r l; do summary+=("$l"); done < <(grep PARITY "$L/parity.log")
fi

if has bench; then
  clefserve serve --model $M --device cuda --port 8731 --max-length 16384 >> "$L/misc.log" 2>&1 &
  SP=$!
  for i in $(seq 1 120); do curl -sf http://127.0.0.1:8731/health > /dev/null && break; sleep 1; done
  timeout 150 clefserve bench --url http://127.0.0.1:8731 --manifest manifests/public231-shape.jsonl --concurrency 1 \
    --warmup 5 --traversals "${TRAV:-3}" --out /tmp/bench > "$L/bench.log" 2>&1
  summary+=("bench rc $?")
  cp /tmp/bench/*.md "$L/bench_report.md" 2>/dev/null
  kill $SP; wait $SP 2>/dev/null
  tail -25 "$L/bench.log"
fi

if has probs; then
  # CUDA bf16 vs CPU fp32 on a handful of requests (the tiny golden requests, any model name is served).
  head -4 tests/golden/models/tiny-r2.expected.jsonl | python3 -c "
import sys, json
for i, l in enumerate(sys.stdin):
    open(f'/tmp/req{i}.json', 'w').write(json.dumps(json.loads(l)['request']))"
  for i in ${PROBS_REQS:-0 1}; do
    clefserve decide --model $M --device cuda --raw --truncation allow < /tmp/req$i.json > /tmp/cuda$i.json 2>>"$L/probs.log"
    timeout ${CPU_TIMEOUT:-100} clefserve decide --model $M --device cpu --raw --truncation allow < /tmp/req$i.json > /tmp/cpu$i.json 2>>"$L/probs.log"
  done
  python3 - <<'PY' | tee -a "$L/probs.log"
import json
worst = 0.0
for i in range(4):
    import os
    if not os.path.exists(f"/tmp/cuda{i}.json"): continue
    try:
        a = json.load(open(f"/tmp/cuda{i}.json")); b = json.load(open(f"/tmp/cpu{i}.json"))
    except Exception as e:
        print(f"request {i}: missing ({e})"); continue
    d = max(abs(a["raw"][q]["probabilities"][o] - b["raw"][q]["probabilities"][o]) for q in b["raw"] for o in b["raw"][q]["probabilities"])
    worst = max(worst, d)
    print(f"PROBS request {i}: {a['usage']['input_tokens']} tokens, max |p_cuda_bf16 - p_cpu_fp32| {d:.4g}")
print(f"PROBS worst {worst:.4g}")
PY
  while read -r l; do summary+=("$l"); done < <(grep "PROBS" "$L/probs.log")
fi

print_summary
[ -f "$L/profile_bf16.txt" ] && cat "$L/profile_bf16.txt"
