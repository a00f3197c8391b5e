#!/usr/bin/env bash
# The FP8 gate (docs/engine.md "FP8"): one bf16 flash-preset release M (realistic weights) and its
# FP8 twin M8 (`make-model --dtype fp8`, same seed: M's bf16 values quantised per 128x128 block), N
# decisions of manifests/public231-shape.jsonl served by `clefserve serve` and recorded by
# `clefserve bench` (one pass, concurrency 1, the same --max-length and truncation for every run).
# Runs (label:model:dtype), default:
#   f32      M  float32   the CUDA float32 engine: ground truth
#   bf16     M  bfloat16
#   fp8      M  fp8       weights quantised at load
#   f32w8    M8 float32   exact float32 arithmetic on the dequantised FP8 weights: FP8's weight
#                         rounding alone, with no FP8 kernel involved
#   fp8ckpt  M8 fp8       the checkpoint's codes and scales
# Then max |dp| and flipped choices of every pair in PAIRS (also counting only choices whose
# reference margin, top-1 minus top-2 probability, exceeds 0.05), and `clefserve profile` fp8 beside
# bf16. Logs under $OUT, summary last.
# Budget (H200): make-model ~100 s each (realistic); per serve ~30-60 s start + prepare; float32
# ~0.3 s a decision at <= 2048 tokens; the two profiles ~40 s each.
# Usage (repo root on the device): N=200 MAXLEN=2048 STEPS="model decide profile" scripts/device/fp8_gate.sh
set -uo pipefail
STEPS="${STEPS:-model decide profile}"
N=${N:-200}
MAXLEN=${MAXLEN:-2048}
RUNS="${RUNS:-f32:M:float32 bf16:M:bfloat16 fp8:M:fp8 f32w8:M8:float32 fp8ckpt:M8:fp8}"
PAIRS="${PAIRS:-bf16:f32 fp8:f32 fp8ckpt:f32 f32w8:f32 fp8ckpt:f32w8 fp8:fp8ckpt}"
source scripts/device/setup.sh > /dev/null
M=/tmp/flash_realistic
M8=/tmp/flash_realistic_fp8
L=$OUT
PORT=8741
if has model; then
  for spec in "$M bfloat16" "$M8 fp8"; do
    set -- $spec
    [[ " $RUNS " == *":$([ "$1" = "$M" ] && echo M || echo M8):"* ]] || continue
    t0=$(date +%s)
    rc=0
    [ -d "$1" ] || clefserve make-model --preset flash --weights realistic --dtype "$2" --force \
      --out "$1" --tokenizer tests/golden/tokenizers/qwen3 >> "$L/misc.log" 2>&1 || rc=$?
    summary+=("model: flash, realistic weights, $2 ($(( $(date +%s) - t0 )) s) rc $rc")
  done
fi
if has decide; then
  head -n "$N" manifests/public231-shape.jsonl > /tmp/fp8_gate_manifest.jsonl
  for run in $RUNS; do
    IFS=: read -r label mk dt <<< "$run"
    model=$([ "$mk" = M ] && echo $M || echo $M8)
    read -r up rc secs <<< "$(serve_decide "$label" $PORT /tmp/fp8_gate_manifest.jsonl 300 400 \
      --model "$model" --device cuda --dtype "$dt" --max-length "$MAXLEN" --truncation allow \
      --tuning-cache off)"
    summary+=("$label ($mk $dt): start $up s, bench rc $rc $secs s :: health $(python3 -c "
import json; h = json.load(open('/tmp/health_$label.json')); print(h['dtype'], h['quantization'])" 2>&1)")
    [ "$dt" = fp8 ] && while read -r l; do summary+=("  $l"); done < <(grep -E "FP8" "$L/serve_$label.log" | head -4)
  done
  summary+=("$(python3 scripts/device/compare_answers.py $PAIRS)")
fi
if has profile; then
  for dt in bfloat16 fp8; do
    timeout 200 clefserve profile --model $M --device cuda --dtype $dt --lengths 961,5661 --runs 5 \
      --warmup 2 > "$L/profile_$dt.txt" 2>>"$L/misc.log"
    summary+=("profile $dt rc $?")
    while read -r l; do summary+=("  $l"); done < <(grep -E '^\| (tokens|961|5661) ' "$L/profile_$dt.txt")
  done
fi
print_summary
