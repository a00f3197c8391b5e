#!/usr/bin/env bash
# One device call (session 37) for the SwiGLU GEMM's epilogue warps (gemm/swiglu_gemm.h,
# SwigluEpilogue): its GPU tests, workbench_gemm_swiglu (both epilogues against cuBLASLt + swiglu,
# bit for bit, then timed), the packed 7 x 1000 forward with each epilogue, then the served
# invariance check of the default (C1, C16, short C64, compares; invariance_check.sh). Results in
# $OUT/result.txt.
# Usage (repo root on the device): [SERVED=1] scripts/device/swiglu_epilogue_check.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
R=$OUT/result.txt
nvidia-smi -L | tee -a "$R"
( make_release flash /tmp/flash "$OUT/make_model.log" ) &
MKP=$!
timeout 150 test_gpu --gtest_brief=1 --gtest_filter='SwigluGemm.*:*CudaEngineGolden*Packed*' \
  > "$OUT/tests.log" 2>&1
echo "tests rc $?" | tee -a "$R"
grep -E '^\[  (PASSED|FAILED|SKIPPED)|FAILED|Failure|packed vs alone' "$OUT/tests.log" | head -20 |
  tee -a "$R"
CLEF_BENCH_MS=384,1024,7040 timeout 200 workbench_gemm_swiglu > "$OUT/workbench.txt" 2>&1
echo "workbench rc $?" | tee -a "$R"
grep -E "equal|^M [0-9]+: unfused|MISMATCH|FAIL" "$OUT/workbench.txt" | tee -a "$R"
wait $MKP
for e in consumers warps; do
  CLEF_SWIGLU_EPILOGUE=$e CLEF_BATCH_INVARIANT=0 timeout 150 clefserve profile --model /tmp/flash \
    --device cuda --lengths 1000 --runs 5 --warmup 2 --batch 7 > "/tmp/prof_$e.txt" 2>&1
  echo "## profile 7 x 1000, epilogue $e (rc $?)" | tee -a "$R"
  grep -E "^\| (7|1000) |^\| 7 x 1000" "/tmp/prof_$e.txt" | tee -a "$R"
done
cp /tmp/prof_warps.txt "$OUT/profile_warps.txt"
if [ "${SERVED:-1}" = 1 ]; then
  TESTS=0 MODES=default scripts/device/invariance_check.sh > /dev/null 2>&1
fi
grep -vE "^==|fastest one-class|engine's picks" "$R"
