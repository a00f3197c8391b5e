#!/usr/bin/env bash
# A closing call that also says what batch invariance costs a pack: pack_profile.sh's packed
# forwards (PACKS, default 7 x 1000 and one C16 draw) in the default and the off mode (e2e, each
# mode's own GEMM floor, eager stages: the default mode's floor runs the class-restricted GEMM
# choices, the off mode's the fastest ones), then closing_check.sh's served table on the default
# server with the off mode's 7 x 1000 floor as the ceiling's (no second floor profile).
# With workbench_gdn_chain carried, it runs first (check and times; $OUT/gdn_chain.txt).
# Results in $OUT/result.txt; each step's elapsed seconds beside it.
# Usage (repo root on the device): [PACKS=...] [RUNS_SERVED="..."] scripts/device/closing_profile.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
R=$OUT/result.txt
t0=$(date +%s)
if [ -x /tmp/c/bin/workbench_gdn_chain ]; then  # the wgmma chain prototype (dev/cuda/gdn_chain.cu)
  timeout 120 workbench_gdn_chain > "$OUT/gdn_chain.txt" 2>&1
  echo "workbench_gdn_chain rc $? ($(( $(date +%s) - t0 ))s)" | tee -a "$R"
  grep -vE '^seed' "$OUT/gdn_chain.txt" | tee -a "$R"
fi
PACKS=${PACKS-"1000,1000,1000,1000,1000,1000,1000;446,412,5538,330,303,404,345"} MODES="default off" \
  RUNS=3 scripts/device/pack_profile.sh > /dev/null 2>&1
fl=$(awk -F'|' '/^## off/ {off = 1} off && $2 ~ /^ 1000,1000,1000,1000,1000,1000,1000 $/ {
  printf "%.0f", $4 / $6 * 1000; exit }' "$R")
echo "floor (off mode, 7 x 1000): ${fl:-none} tokens/s ($(( $(date +%s) - t0 ))s)" | tee -a "$R"
RUNS_SERVED=${RUNS_SERVED:-"public231-shape:1 public231-shape:4 public231-shape:16 \
public231-shape:64 public231-short:16 public231-short:64"}
TESTS=0 MODES=default FLOOR_TPS=$fl RUNS="$RUNS_SERVED" scripts/device/invariance_check.sh \
  > /dev/null 2>&1
echo "elapsed $(( $(date +%s) - t0 ))s" | tee -a "$R"
grep -vE "^==|fastest one-class|engine's picks" "$R" | tail -60
