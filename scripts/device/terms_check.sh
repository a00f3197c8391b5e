#!/usr/bin/env bash
# The precision budget of the GDN chain's bf16 terms (perf-log v25a): for the default (two terms
# each) and for W, the published state and diag(F) Vn each in one term (CLEF_GDN_W_TERMS /
# CLEF_GDN_S_TERMS / CLEF_GDN_V_TERMS=1, FlashInfer's one-term chain), the bf16 golden cases'
# max |dp| against the reference's own bf16 noise, and the packed core's time a layer in the
# workbench; then Nsight Compute on the three kernels of the default at one pack (device call).
# Usage (repo root on the device): [STEPS="tests golden wb ncu"] [PACKS="1000x7;5000+300x6"]
#   [VARIANTS_LIST="VAR=1 VAR2=1;VAR3=8"] [NCU_PACK=1000x7] [NCU_VARS="VAR=1"] scripts/device/terms_check.sh
set -uo pipefail
source scripts/device/setup.sh > "$OUT/setup.txt" 2>&1
cat "$OUT/setup.txt" | head -3
PACKS=${PACKS:-1000x7;5000+300x6}
STEPS=${STEPS:-tests golden wb ncu}
VARIANTS=("")
IFS=';' read -ra more <<< "${VARIANTS_LIST:-CLEF_GDN_S_TERMS=1;CLEF_GDN_V_TERMS=1;CLEF_GDN_W_TERMS=1 CLEF_GDN_S_TERMS=1 CLEF_GDN_V_TERMS=1}"
VARIANTS+=("${more[@]}")
if has tests; then
t0=$(date +%s)
timeout 300 test_gpu --gtest_brief=1 --gtest_filter='GdnLaunch.*:*CudaEngineGolden*' > "$OUT/tests.log" 2>&1
echo "tests (default terms): rc $? in $(( $(date +%s) - t0 )) s"
grep -E "^\[  (PASSED|FAILED)|FAILED|chain terms|W terms|max \|dp\|" "$OUT/tests.log" | grep -v fp8 | head -24
fi
has golden && for v in "${VARIANTS[@]:1}"; do
  t0=$(date +%s)
  timeout 200 env $v test_gpu --gtest_brief=1 --gtest_filter='*CudaEngineGolden*' > "$OUT/golden_var.log" 2>&1
  echo "golden with $v: rc $? in $(( $(date +%s) - t0 )) s"
  grep -E "^\[  (PASSED|FAILED)|FAILED|max \|dp\|" "$OUT/golden_var.log" | grep -v fp8 | head -12
done
has wb && for v in "${VARIANTS[@]}" ""; do
  echo "## workbench_gdn ${v:-default}"
  timeout 120 env $v CLEF_BENCH_PACK="$PACKS" workbench_gdn 2>&1 | grep -E "1 CTA an SM|differs" | grep -v "slot order"
done
if has ncu; then  # the packed default's three kernels (scripts/device/ncu_gdn.sh)
  t0=$(date +%s)
  env ${NCU_VARS:-} PACK="${NCU_PACK:-1000x7}" timeout 240 scripts/device/ncu_gdn.sh > "$OUT/ncu_gdn.txt" 2>&1
  echo "ncu rc $? in $(( $(date +%s) - t0 )) s"
  grep -E "^  [a-z_:<>, 0-9A-Z()]*kernel|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Executed Ipc A|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|Stall" "$OUT/ncu_gdn.txt" | cut -c1-150 | head -60
fi
