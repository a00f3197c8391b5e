#!/usr/bin/env bash
# One device call for a GDN-kernel change: build check, the GDN / packing / golden GPU tests (or
# GTEST_FILTER), workbench_gdn of this tree and of the carried previous build (bin/*_before, when
# packed), `clefserve profile` of text at 361 / 961 / 2761 / 5661 tokens (PROFILE_LENGTHS) for both, optionally Nsight Compute
# of the three GDN kernels (NCU_T=tokens), `media` (with `profile`): the 1024^2 JPEG profile;
# `tests_on`: the engine tests with the in-scan GDN output on (CLEF_GDN_SCAN_OUTPUT=1, perf-log
# v16a), and PROFILE_SCAN_OUTPUT="0 1" profiles with it off and on. Logs in $OUT, summary last.
# Usage (repo root on the device): [STEPS="tests wb profile ncu"] [GTEST_FILTER=...] scripts/device/gdn_check.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
STEPS=${STEPS:-tests wb profile}
start_check
if has tests; then
  t0=$(date +%s)
  F=${GTEST_FILTER:-*Gdn*:*Packed*:*PackTables*:*Golden*:*GatedNorm*:*BackboneKernels*:*CudaEngine*:*KernelVariants*}
  timeout "${TEST_TIMEOUT:-240}" test_gpu --gtest_brief=1 --gtest_filter="$F" > "$L/test_gpu.log" 2>&1
  summary+=("test_gpu $F: rc $? in $(( $(date +%s) - t0 )) s :: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)|tests from .* ran' "$L/test_gpu.log" | tr '\n' ' ')")
  while read -r l; do summary+=("  $l"); done < <(grep -E "FAILED|bf16.*noise|tiny-r[23] bfloat16 \(auto\)" "$L/test_gpu.log" | head -16)
fi
if has tests_on; then  # GdnGatedNorm.* assume the fused norm, which the mode turns off: left out
  t0=$(date +%s)
  CLEF_GDN_SCAN_OUTPUT=1 timeout "${TEST_TIMEOUT:-240}" test_gpu --gtest_brief=1 \
    --gtest_filter='*Golden*:*CudaEngine*:*Packed*:*Gdn*:-GdnGatedNorm.*' > "$L/test_gpu_on.log" 2>&1
  summary+=("test_gpu (CLEF_GDN_SCAN_OUTPUT=1): rc $? in $(( $(date +%s) - t0 )) s :: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)|tests from .* ran' "$L/test_gpu_on.log" | tr '\n' ' ')")
  while read -r l; do summary+=("  $l"); done < <(grep -E "FAILED|bf16.*noise|tiny-r[23] bfloat16 \(auto\)" "$L/test_gpu_on.log" | head -16)
fi
if has wb; then
  timeout 90 workbench_gdn > "$L/workbench_gdn.txt" 2>&1; summary+=("workbench_gdn rc $?")
  timeout 60 workbench_gdn_prep > "$L/workbench_gdn_prep.txt" 2>&1; summary+=("workbench_gdn_prep rc $?")
  for b in /tmp/c/bin/workbench_gdn_*; do  # carried variants: a previous build (_before), experiments
    [ -x "$b" ] && [ "$b" != /tmp/c/bin/workbench_gdn_prep ] || continue
    timeout 90 "$b" > "$L/$(basename "$b").txt" 2>&1; summary+=("$(basename "$b") rc $?")
  done
fi
wait_model
if has profile; then
  for b in ${PROFILE_BINS:-clefserve clefserve_before}; do
    [ -x /tmp/c/bin/$b ] || continue
    for so in ${PROFILE_SCAN_OUTPUT:-0}; do
      echo "## $b CLEF_GDN_SCAN_OUTPUT=$so" >> "$L/profile.txt"
      CLEF_GDN_SCAN_OUTPUT=$so timeout 150 /tmp/c/bin/$b profile --model $M --device cuda --lengths ${PROFILE_LENGTHS:-361,961,2761,5661} --runs 7 --warmup 2 >> "$L/profile.txt" 2>>"$L/misc.log"
      summary+=("text profile $b CLEF_GDN_SCAN_OUTPUT=$so rc $?")
    done
  done
fi
if has media; then  # the 1024^2 JPEG request (issue 17's bar) on this tree
  timeout 100 clefserve profile --model $M --device cuda --runs 5 --warmup 2 --media 1@1024x1024 \
    --media-format jpeg >> "$L/profile.txt" 2>>"$L/misc.log"
  summary+=("media profile jpeg:1@1024x1024 rc $?")
fi
if has ncu; then
  T=${NCU_T:-961} bash scripts/device/ncu_gdn.sh > "$L/ncu_gdn.txt" 2>&1
  summary+=("ncu_gdn rc $?")
fi
print_summary
[ -f "$L/profile.txt" ] && grep -E "^## |^\| [0-9]|^media" "$L/profile.txt"
for f in "$L"/workbench_gdn*.txt; do [ -f "$f" ] && { echo "-- $(basename "$f")"; grep -E "^\[gdn split\] gdn_tensor_core|^\[gdn in-scan output\]|FAIL|fail" "$f" | tail -12; }; done
exit 0
