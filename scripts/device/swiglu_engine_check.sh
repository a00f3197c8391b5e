#!/usr/bin/env bash
# One device call (session 36) for the SwiGLU-epilogue GEMM in the engine (gemm/swiglu_gemm.h):
# its GPU tests and the swiglu / packed golden tests, then the served invariance check in MODES
# (default: "default"; invariance_check.sh: the packed 7 x 1000 forward, C1, C16, short C64 and the
# compares), results in $OUT/result.txt.
# FILTER: the GPU tests (session 37 ran it with the attention tests the Hopper-async refactor
# touches added: SwigluGemm.*:*Swiglu*:*CudaEngineGolden*:GemmModule.*:WgmmaAttention.*:
# AttentionCore*:SegmentAttention.*).
# Usage (repo root on the device): [MODES="default"] [FILTER=...] scripts/device/swiglu_engine_check.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
export CLEF_SWIGLU_GEMM=${CLEF_SWIGLU_GEMM:-1}  # the engine path under test (the default since v29g)
R=$OUT/result.txt
nvidia-smi -L | tee -a "$R"
gpu_tests "${FILTER:-SwigluGemm.*:*Swiglu*:*CudaEngineGolden*Packed*:GemmModule.*}" 200
TESTS=0 MODES=${MODES:-default} scripts/device/invariance_check.sh > /dev/null 2>&1
grep -vE "^==|fastest one-class|engine's picks" "$R"
grep -E "^\| (7|1000) |e2e .* ms, floor|kernels.elementwise" "$OUT/profile.txt" | head -6
