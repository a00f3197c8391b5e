#!/usr/bin/env bash
# One device call (session 36): the served invariance check in MODES (default: "default off";
# invariance_check.sh, results in $OUT/result.txt), then the SwiGLU-epilogue GEMM's workbench
# (dev/cuda/gemm_swiglu.cu: its checks, then its time against cuBLASLt + swiglu_vec8), its log in
# $OUT/workbench_gemm_swiglu.log and its summary appended to result.txt.
# Usage (repo root on the device): [MODES="default off"] [WB_MS=384,1024,7040] scripts/device/swiglu_and_check.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
TESTS=0 MODES=${MODES:-default off} scripts/device/invariance_check.sh > /dev/null 2>&1
R=$OUT/result.txt
CLEF_BENCH_MS=${WB_MS:-384,1024,7040} timeout 120 /tmp/c/bin/workbench_gemm_swiglu \
  > "$OUT/workbench_gemm_swiglu.log" 2>&1
echo "workbench_gemm_swiglu rc $?" >> "$R"
grep -E "^M |^check|^gemm_swiglu|MISMATCH|error|^seed" "$OUT/workbench_gemm_swiglu.log" | head -30 >> "$R"
grep -vE "^==|fastest one-class|engine's picks" "$R"
