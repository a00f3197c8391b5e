#!/usr/bin/env bash
# The FP8 gate (docs/engine.md "FP8"): one bf16 flash-preset release (realistic weights), N
# decisions of manifests/public231-shape.jsonl served by `clefserve serve` and recorded by
# `clefserve bench` (one pass, concurrency 1, the same --max-length and truncation for every dtype)
# with --dtype float32 (the CUDA float32 engine: ground truth), bfloat16 and fp8; then max |dp| and
# the share of flipped choices of bf16 and fp8 vs float32, and `clefserve profile` fp8 beside bf16
# (e2e and the GEMM floor). Logs under $OUT, summary last.
# Budget (H200): make-model ~30 s; per serve ~30-60 s start + prepare; float32 ~0.3 s a decision
# at <= 2048 tokens (fp32 GEMMs without TF32, ~18 GFLOP a token); the two profiles ~40 s each.
# Usage (repo root on the device): N=200 MAXLEN=2048 STEPS="model decide profile" scripts/device/fp8_gate.sh
set -uo pipefail
STEPS="${STEPS:-model decide profile}"
N=${N:-200}
MAXLEN=${MAXLEN:-2048}
source scripts/device/setup.sh > /dev/null
M=/tmp/flash_realistic
L=$OUT
PORT=8741
has() { [[ " $STEPS " == *" $1 "* ]]; }
summary=()
if has model; then
  t0=$(date +%s)
  [ -d $M ] || clefserve make-model --preset flash --weights realistic --force --out $M \
    --tokenizer tests/golden/tokenizers/qwen3 > "$L/misc.log" 2>&1
  summary+=("model: flash, realistic weights, bf16 ($(( $(date +%s) - t0 )) s)")
fi
if has decide; then
  head -n "$N" manifests/public231-shape.jsonl > /tmp/fp8_gate_manifest.jsonl
  for dt in float32 bfloat16 fp8; do
    t0=$(date +%s)
    clefserve serve --model $M --device cuda --dtype $dt --port $PORT --max-length "$MAXLEN" \
      --truncation allow --tuning-cache off > "$L/serve_$dt.log" 2>&1 &
    SP=$!
    for i in $(seq 1 400); do curl -sf http://127.0.0.1:$PORT/health > /tmp/health_$dt.json && break; kill -0 $SP 2>/dev/null || break; sleep 0.5; done
    t1=$(date +%s)
    rm -rf /tmp/fp8_gate_$dt
    timeout 300 clefserve bench --url http://127.0.0.1:$PORT --manifest /tmp/fp8_gate_manifest.jsonl \
      --concurrency 1 --warmup 0 --traversals 1 --out /tmp/fp8_gate_$dt > "$L/bench_$dt.log" 2>&1
    rc=$?
    kill $SP; wait $SP 2>/dev/null
    summary+=("$dt: start $(( t1 - t0 )) s, bench rc $rc $(( $(date +%s) - t1 )) s :: health $(python3 -c "
import json; h = json.load(open('/tmp/health_$dt.json')); print(h['dtype'], h['quantization'])" 2>&1)")
    [ $dt = fp8 ] && while read -r l; do summary+=("  $l"); done < <(grep -E "FP8" "$L/serve_$dt.log" | head -12)
  done
  summary+=("$(python3 - <<'EOF'
import json

def answers(dt):
    r = json.load(open(f'/tmp/fp8_gate_{dt}/report.json'))
    out = {}
    for q in r['requests']:
        if q.get('outcome') == 'ok' and q.get('answer'):
            out[q['id']] = q['answer']
    return out

def probs(a):
    if a.get('type') == 'noul':
        return {'true': a['noul']}
    return a.get('probabilities', {})

ref = answers('float32')
lines = [f'float32 reference: {len(ref)} requests answered (probabilities rounded to 4 decimals by the API)']
for dt in ('bfloat16', 'fp8'):
    got = answers(dt)
    dp, n, choices, flips, missing = 0.0, 0, 0, 0, 0
    for rid, qs in ref.items():
        if rid not in got:
            missing += 1
            continue
        for qid, a in qs.items():
            b = got[rid].get(qid)
            if b is None:
                missing += 1
                continue
            for k, p in probs(a).items():
                dp = max(dp, abs(p - probs(b).get(k, float('nan'))))
                n += 1
            if a.get('type') == 'choice':
                choices += 1
                flips += a['choice'] != b['choice']
    share = flips / choices if choices else float('nan')
    lines.append(f'{dt} vs float32: max |dp| {dp:.4f} over {n} probabilities; choice flips {flips}/{choices} ({100 * share:.1f}%); missing {missing}')
print('\n'.join(lines))
EOF
)")
fi
if has profile; then
  for dt in bfloat16 fp8; do
    timeout 200 clefserve profile --model $M --device cuda --dtype $dt --lengths 961,5661 --runs 5 \
      --warmup 2 > "$L/profile_$dt.txt" 2>>"$L/misc.log"
    summary+=("profile $dt rc $?")
    while read -r l; do summary+=("  $l"); done < <(grep -E '^\| (tokens|961|5661) ' "$L/profile_$dt.txt")
  done
fi
echo "================ SUMMARY ================"
for s in "${summary[@]}"; do echo "$s"; done
