#!/usr/bin/env bash
# One device call (session 37): the SwiGLU GEMM tests, then workbench_gemm_swiglu (both epilogues,
# checked bit for bit, then timed) at CLEF_SWIGLU_HOLD in HOLDS (the k step at which the epilogue
# warps get a tile's second half). Results in $OUT/result.txt.
# Usage (repo root on the device): [HOLDS="16 32"] scripts/device/swiglu_hold_check.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
R=$OUT/result.txt
nvidia-smi -L | tee -a "$R"
timeout 150 test_gpu --gtest_brief=1 --gtest_filter='SwigluGemm.*' > "$OUT/tests.log" 2>&1
echo "tests rc $?" | tee -a "$R"
grep -E '^\[  (PASSED|FAILED|SKIPPED)|FAILED|Failure' "$OUT/tests.log" | head -20 | tee -a "$R"
for h in ${HOLDS:-16 32}; do
  CLEF_SWIGLU_HOLD=$h CLEF_BENCH_MS=384,1024,7040 timeout 200 workbench_gemm_swiglu \
    > "$OUT/workbench_$h.txt" 2>&1
  echo "## hold $h: workbench rc $?" | tee -a "$R"
  grep -E "MISMATCH|FAIL|^M [0-9]+: unfused" "$OUT/workbench_$h.txt" | tee -a "$R"
done
