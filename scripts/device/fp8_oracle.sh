#!/usr/bin/env bash
# FP8 at flash size: bug or format? (docs/engine.md "FP8"). One FP8 release M8 (`make-model --preset
# flash --weights realistic --dtype fp8`), the shortest items of manifests/public231-short.jsonl:
#   fp8ckpt  cuda fp8           the FP8 engine on the checkpoint's codes (N items)
#   emu8     cpu  fp8-emulated  float32 arithmetic on exactly the values the FP8 engine multiplies
#                               (activations bf16-rounded then e4m3 per 128 channels; the weights'
#                               dequantised codes): the oracle (N_CPU items)
#   cf32w8   cpu  float32       float32 on the dequantised weights, float32 activations (N_CPU items)
# fp8ckpt vs emu8 is the device's own error (bf16 storage between kernels, summation order): near
# bf16's noise if the device is right. emu8 vs cf32w8 is what FP8 activations cost by themselves.
# The two CPU servers run at once, half the cores each. Logs under $OUT, summary last.
# Usage: N=60 N_CPU=12 scripts/device/fp8_oracle.sh
set -uo pipefail
N=${N:-60}
N_CPU=${N_CPU:-12}
MAXLEN=${MAXLEN:-2048}
CPU_TIMEOUT=${CPU_TIMEOUT:-300}
source scripts/device/setup.sh > /dev/null
M8=/tmp/flash_realistic_fp8
L=$OUT
summary=()
t0=$(date +%s)
rc=0
[ -d $M8 ] || clefserve make-model --preset flash --weights realistic --dtype fp8 --force --out $M8 \
  --tokenizer tests/golden/tokenizers/qwen3 >> "$L/misc.log" 2>&1 || rc=$?
summary+=("model: flash, realistic weights, fp8 ($(( $(date +%s) - t0 )) s) rc $rc")
# Shortest items first (line length ~ token count), so the CPU runs answer as many as they can.
python3 - "$N" "$N_CPU" <<'EOF2'
import json, sys
n, n_cpu = int(sys.argv[1]), int(sys.argv[2])
items = sorted(open('manifests/public231-short.jsonl'), key=len)
open('/tmp/oracle_gpu.jsonl', 'w').writelines(items[:n])
open('/tmp/oracle_cpu.jsonl', 'w').writelines(items[:n_cpu])
EOF2
serve_bench() {  # label device dtype port manifest threads timeout
  local label=$1 dev=$2 dt=$3 up rc secs extra=()
  [ "$dev" = cuda ] && extra=(--tuning-cache off)
  read -r up rc secs <<< "$(serve_decide "$label" "$4" "$5" "$7" 600 --model $M8 --device "$dev" \
    --dtype "$dt" --max-length "$MAXLEN" --truncation allow --threads "$6" "${extra[@]}")"
  echo "$label ($dev $dt): start $up s, bench rc $rc in $secs s" > /tmp/line_$label
}
serve_bench fp8ckpt cuda fp8 8741 /tmp/oracle_gpu.jsonl 0 200
serve_bench emu8 cpu fp8-emulated 8742 /tmp/oracle_cpu.jsonl 8 $CPU_TIMEOUT &
B1=$!
serve_bench cf32w8 cpu float32 8743 /tmp/oracle_cpu.jsonl 8 $CPU_TIMEOUT &
B2=$!
wait $B1 $B2
for l in fp8ckpt emu8 cf32w8; do summary+=("$(cat /tmp/line_$l)"); done
summary+=("$(python3 scripts/device/compare_answers.py fp8ckpt:emu8 emu8:cf32w8 fp8ckpt:cf32w8)")
grep -h -E 'p50|mean' "$L"/bench_emu8.log | head -3 | while read -r l; do echo "  emu8 bench: $l"; done
print_summary
