#!/usr/bin/env bash
# The SwiGLU GEMM's overlapped epilogue in one call (perf-log v34a): make-model (flash) in the
# background while the GPU tests (FILTER) and workbench_gemm_swiglu (serial / overlapped / no
# epilogue against cuBLASLt + swiglu at CLEF_BENCH_MS) run; then, only if the tests passed, the
# served A/B: invariance_check.sh with TESTS=0 and MODES (default "default overlapepi": the 7 x 1000
# floor with invariance off, one server a mode, RUNS, each mode's C1 answers against its packs).
# Then the CTA-pair form (PAIRS=0: not): its test and workbench_gemm_swiglu with CLEF_BENCH_PAIRS=1,
# each under a timeout; the served runs last.
# Everything lands in $OUT/result.txt as it comes.
# Usage (repo root on the device): [MODES=...] [RUNS=...] [FILTER=...] [TEST_LIMIT=s]
#   [BENCH_MS=...] [PAIRS=0] [SERVED=0: no make-model, no served runs] scripts/device/epilogue_session.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
session_start "${SERVED:-1}"
gpu_tests "${FILTER:-SwigluGemm.*:*CudaEngineGolden*Packed*-SwigluGemm.CtaPairs*}" "${TEST_LIMIT:-120}"
passed=$(grep -c '^tests rc 0$' "$R")
echo "## workbench_gemm_swiglu ($(( $(date +%s) - t0 ))s)" | tee -a "$R"
CLEF_BENCH_MS=${BENCH_MS:-1024,6784,7040} timeout 150 workbench_gemm_swiglu \
  > "$OUT/wb_swiglu.txt" 2>&1
echo "rc $?" | tee -a "$R"
grep -E "^M |MISMATCH|FAIL" "$OUT/wb_swiglu.txt" | tee -a "$R"
# Before the served runs (bounded by timeouts): the CTA-pair form (CLEF_SWIGLU_PAIRS, off by default),
# its test and its workbench timing.
if [ "${PAIRS:-1}" = 1 ]; then
  echo "## CTA pairs ($(( $(date +%s) - t0 ))s)" | tee -a "$R"
  timeout 45 test_gpu --gtest_brief=1 --gtest_filter='SwigluGemm.CtaPairs*' > "$OUT/pairs.log" 2>&1
  echo "pairs test rc $?" | tee -a "$R"
  grep -E '^\[  (PASSED|FAILED)|Failure' "$OUT/pairs.log" | head -8 | tee -a "$R"
  CLEF_BENCH_PAIRS=1 CLEF_BENCH_MS=${PAIR_MS:-6784,7040} timeout 75 workbench_gemm_swiglu \
    > "$OUT/wb_pairs.txt" 2>&1
  echo "rc $?" | tee -a "$R"
  grep -E "^M |MISMATCH|FAIL" "$OUT/wb_pairs.txt" | tee -a "$R"
fi
if [ -z "$MKP" ]; then
  echo "no served runs (SERVED=0)" | tee -a "$R"
elif wait $MKP && [ "$passed" = 1 ]; then
  TESTS=0 MODES=${MODES:-"default overlapepi"} scripts/device/invariance_check.sh > /dev/null 2>&1
else
  echo "tests did not pass: no served A/B" | tee -a "$R"
fi
echo "total $(( $(date +%s) - t0 ))s" | tee -a "$R"
