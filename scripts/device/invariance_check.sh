#!/usr/bin/env bash
# One device call for batch invariance (issue 14, engine/cuda/batch_invariance.h): the GPU tests of
# the invariant paths, a random release of PRESET (flash, or small: hidden 1024 with flash's bf16
# attention and GDN kernels, minutes cheaper), the packed GEMM floor (flash: 7 x 1000 tokens, with
# CLEF_BATCH_INVARIANT=0, the fastest GEMM choices), then one server per mode (the default, then
# CLEF_BATCH_INVARIANT=0) with `clefserve bench` over public231-shape at C1 and C16 and over
# public231-short at C64, and `clefserve bench compare` of each mode's C1 answers (every request alone)
# against its C16 and short C64 answers (packs). Each result is appended to $OUT/result.txt as soon
# as it exists, so a call cut short keeps what it measured. With workbench_gemm carried, its summary
# (each shape's algorithm classes and whether the engine's per-M picks share one) goes there too.
# RUNS: the bench runs as MANIFEST:CONCURRENCY (default "public231-shape:1 public231-shape:16
# public231-short:64"; the compares need the first and the last two).
# FLOOR_TPS: the ceiling's floor in tokens/s, given (no packed-forward profile).
# Usage (repo root on the device): [PRESET=small] [TRAV=2] [TESTS=0] [MODES="default off rows noown"]
#   [RUNS="..."] scripts/device/invariance_check.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
PRESET=${PRESET:-flash}
M=/tmp/$PRESET
session_start "$PRESET"
if [ "${TESTS:-1}" = 1 ]; then
  gpu_tests 'GemmModule.*:GdnLaunch.PackedSequences*:GdnLaunch.PerPack*:GdnLaunch.ChunkPrefix*:*CudaEngineGolden*Packed*' 200
fi
if [ -x /tmp/c/bin/workbench_gemm ]; then  # the bit classes of the backbone's GEMM algorithms
  CLEF_BENCH_MS=${BENCH_MS:-384,1024,4096,8192} timeout 150 workbench_gemm > /tmp/wb_gemm.txt 2>&1
  echo "workbench_gemm rc $?" | tee -a "$R"
  grep -E "^==|engine's picks|fastest one-class|^gemm:" /tmp/wb_gemm.txt | tee -a "$R"
fi
wait $MKP
FLOOR=()
if [ -n "${FLOOR_TPS:-}" ]; then  # a floor measured elsewhere (tokens/s): no profile here
  FLOOR=(--gemm-floor-tokens-per-s "$FLOOR_TPS")
  echo "GEMM floor $FLOOR_TPS tokens/s (given)" | tee -a "$R"
elif [ "$PRESET" = flash ]; then
  CLEF_BATCH_INVARIANT=0 timeout 150 clefserve profile --model "$M" --device cuda --lengths 1000 \
    --runs 5 --warmup 2 --batch 7 --json /tmp/inv_batch.json > "$OUT/profile.txt" 2>&1
  fl=$(python3 -c "
import json; r = json.load(open('/tmp/inv_batch.json'))['rows'][0]
print('%.0f' % (r['batch'] * r['tokens'] / r['batch_gemm_floor_ms'] * 1000))" 2>/dev/null)
  echo "GEMM floor ${fl:-none} tokens/s ($(( $(date +%s) - t0 ))s)" | tee -a "$R"
  [ -n "$fl" ] && FLOOR=(--gemm-floor-tokens-per-s "$fl")
fi
n=0
# MODES: any of setup.sh's mode_env modes (default, off, rows, noown); "default off" unless given.
modes=()
for m in ${MODES:-default off}; do
  if e=$(mode_env "$m"); then modes+=("$e"); else echo "unknown mode $m" | tee -a "$R"; fi
done
for mode in "${modes[@]}"; do
  n=$((n + 1))
  PORT=$((8790 + n))
  env $mode clefserve serve --model "$M" --device cuda --port $PORT > "/tmp/inv_serve$n.log" 2>&1 &
  SP=$!
  for i in $(seq 1 600); do
    curl -sf http://127.0.0.1:$PORT/health > /dev/null && break
    kill -0 $SP 2>/dev/null || break
    sleep 0.5
  done
  echo "## server $n ${mode:-default (batch invariant)} healthy at $(( $(date +%s) - t0 ))s;" \
    "$(grep -h 'GEMM batch invariance' "/tmp/inv_serve$n.log" | head -1)" | tee -a "$R"
  grep -h 'SwiGLU GEMM' "/tmp/inv_serve$n.log" | head -1 | tee -a "$R"
  curl -s http://127.0.0.1:$PORT/health | python3 -c \
    'import json, sys; print("startup", json.dumps(json.load(sys.stdin).get("startup")))' \
    2>&1 | tee -a "$R"
  for run in ${RUNS:-public231-shape:1 public231-shape:16 public231-short:64}; do
    set -- ${run/:/ }
    out=/tmp/inv_b${n}_$1_$2
    timeout 200 clefserve bench --url http://127.0.0.1:$PORT --manifest "manifests/$1.jsonl" \
      --concurrency "$2" --warmup "$2" --traversals "${TRAV:-2}" "${FLOOR[@]}" --out "$out" \
      > /dev/null 2>&1
    echo "$1 C$2 rc $?: $(python3 -c "
import json; r = json.load(open('$out/report.json')); l = r.get('successful_latency_ms', {})
t = r.get('throughput', {}); f = (r.get('failures') or {}).get('total')
print('req/s %.2f p50 %.1f p95 %.1f failures %s' % (t.get('requests_per_s') or 0, l.get('p50') or 0, l.get('p95') or 0, f))" 2>&1)" |
      tee -a "$R"
    grep -E "^(Server batches|GEMM-bound ceiling)" "$out/report.md" | tee -a "$R"
  done
  kill $SP
  wait $SP 2>/dev/null
  for packed in public231-shape_16 public231-short_64; do
    echo "# invariance, server $n: C1 (alone) vs $packed" | tee -a "$R"
    clefserve bench compare --b-subset "/tmp/inv_b${n}_public231-shape_1/report.json" \
      "/tmp/inv_b${n}_$packed/report.json" 2>&1 | grep -vE '^  flip' | tail -5 | tee -a "$R"
  done
  echo "elapsed $(( $(date +%s) - t0 ))s" | tee -a "$R"
done
exit 0
