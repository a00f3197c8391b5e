#!/usr/bin/env bash
# One device call for perf-log v40 (packs at their exact rows): the GPU tests of packed forwards
# (the exact-rows tests among them) while make-model runs, then pack_profile.sh's packs in MODES
# (default: every pack at its bucket's graph; exact: packs of the 4096-token buckets and up at
# their exact rows, eagerly; exact2k: the same from the 2048-token buckets on).
# Output: $OUT/result.txt, $OUT/tests.log, $OUT/pack_MODE.log.
# Usage (repo root on the device): [MODES="default exact exact2k"] [RUNS=5]
#   scripts/device/exact_rows_check.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
session_start flash
gpu_tests '*CudaEngineGolden*Packed*:*PacksAtExact*:*Pipelined*:GemmModule.*' 240
wait "$MKP"
MODES=${MODES:-"default exact exact2k"} RUNS=${RUNS:-5} scripts/device/pack_profile.sh > /dev/null
echo "total $(( $(date +%s) - t0 ))s" | tee -a "$R"
