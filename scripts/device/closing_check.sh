#!/usr/bin/env bash
# The closing device call of session 37: every GPU test (test_gpu, as final_check.sh runs it), then
# the served table issue 14 asks for on the default server (invariant, SwiGLU GEMM):
# public231-shape at C1, C4, C16, C64 and public231-short at C16, C64 with the GEMM-bound ceiling
# and the batch histograms, and C1 (alone) against C16 and short C64 (invariance_check.sh).
# Results in $OUT/result.txt.
# FILTER / TEST_LIMIT: another test subset and limit.
# Usage (repo root on the device): [TESTS=1] [FILTER=...] [TEST_LIMIT=s] scripts/device/closing_check.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
session_start flash
if [ "${TESTS:-1}" = 1 ]; then
  # 300 s was too short for all of them beside make-model (perf-log v30b)
  gpu_tests "${FILTER:--GdnTiming*}" "${TEST_LIMIT:-450}"
fi
wait $MKP
TESTS=0 MODES=default RUNS="public231-shape:1 public231-shape:4 public231-shape:16 \
public231-shape:64 public231-short:16 public231-short:64" scripts/device/invariance_check.sh \
  > /dev/null 2>&1
grep -vE "^==|fastest one-class|engine's picks" "$R" | tail -40
