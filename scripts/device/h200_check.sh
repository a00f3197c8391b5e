#!/usr/bin/env bash
# One device call (session 37): the GPU tests the Hopper-async refactor touches (SwiGLU GEMM, flash
# wgmma attention, the packed goldens, the GEMM module), then the served invariance check (default
# mode: C1, C16, short C64 and their compares; invariance_check.sh), results in $OUT/result.txt.
# Usage (repo root on the device): [MODES="default"] scripts/device/h200_check.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
R=$OUT/result.txt
nvidia-smi -L | tee -a "$R"
timeout 200 test_gpu --gtest_brief=1 --gtest_filter='SwigluGemm.*:*Swiglu*:*CudaEngineGolden*:GemmModule.*:WgmmaAttention.*:AttentionCore*:SegmentAttention.*' \
  > "$OUT/tests.log" 2>&1
echo "tests rc $?" | tee -a "$R"
grep -E '^\[  (PASSED|FAILED|SKIPPED)|FAILED|Failure|packed vs alone|joined' "$OUT/tests.log" |
  head -20 | tee -a "$R"
TESTS=0 MODES=${MODES:-default} scripts/device/invariance_check.sh > /dev/null 2>&1
grep -vE "^==|fastest one-class|engine's picks" "$R"
grep -E "^\| (7|1000) |e2e .* ms, floor|kernels.elementwise" "$OUT/profile.txt" | head -6
