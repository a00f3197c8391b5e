#!/usr/bin/env bash
# Run-to-run spread of the golden CUDA-engine parity lines, per binary: test_gpu's golden tests
# N times for the "after" build (bin/) and the "before" build (before/), printing the lines of each
# run. The backbone's GEMM algorithms are chosen by timing, so near-tied candidates can change the
# last bits of a float32 logit from one process to the next.
# Usage (repo root on the device): N=3 scripts/device/golden_repeat.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
for who in before after; do
  bin=test_gpu; [ $who = before ] && bin=/tmp/c/before/test_gpu
  for r in $(seq 1 "${N:-3}"); do
    $bin --gtest_brief=1 --gtest_filter='*CudaEngineGolden.Float32*:*CudaEngineGolden.Bfloat16*' 2>&1 | grep -E "^tiny" | sed "s/^/$who run $r: /"
  done
done
