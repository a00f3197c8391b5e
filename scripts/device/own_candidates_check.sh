#!/usr/bin/env bash
# One device call for the GEMM class's own candidates (issue 14, perf-log v29c; ~7 min on the flash
# preset): the GEMM and packed golden GPU tests (the GEMM module's request-rows test holds whatever
# joins a class to the same bits and prints how many joined), lone requests of
# LONE tokens profiled in the modes default / noown (CLEF_GEMM_OWN_CANDIDATES=0) / off
# (CLEF_BATCH_INVARIANT=0), then the served default with invariance_check.sh (C1, C16, short C64,
# and C1 against both packed runs). Output: $OUT/result.txt (at most 7 files under $OUT).
# Usage (repo root on the device): [LONE=300,400,1000] scripts/device/own_candidates_check.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
R=$OUT/result.txt
gpu_tests 'GemmModule.*:*CudaEngineGolden*Packed*' 150
MODES="default noown off" PACKS= LONE=${LONE:-300,400,1000} RUNS=${RUNS:-5} \
  scripts/device/pack_profile.sh > /dev/null
TESTS=0 MODES=default TRAV=${TRAV:-2} scripts/device/invariance_check.sh > /dev/null
cat "$R"
exit 0
