#!/usr/bin/env bash
# One device call for the in-scan GDN output (perf-log v16a, GdnOutputMode::InScan; off unless
# CLEF_GDN_SCAN_OUTPUT=1): its GPU tests and the GDN / packing / gated-norm tests; the engine tests
# (golden fixtures, packed batches, no one-time work) with the mode on for the whole process; the
# workbench's `[gdn in-scan output]` rows; `clefserve profile` of text with the mode off and on
# (PROFILE_LENGTHS, default 361,961,2761,5661). Logs in $OUT, summary last.
# Usage (repo root on the device): [STEPS="tests engine wb profile"] scripts/device/scan_output_check.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
STEPS=${STEPS:-tests engine wb profile}
start_check
if has tests; then
  t0=$(date +%s)
  timeout "${TEST_TIMEOUT:-240}" test_gpu --gtest_brief=1 \
    --gtest_filter='GdnScanOutput.*:*Gdn*:*Packed*:*PackTables*:*GatedNorm*' > "$L/test_gpu.log" 2>&1
  summary+=("test_gpu (mode off): rc $? in $(( $(date +%s) - t0 )) s :: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)|tests from .* ran' "$L/test_gpu.log" | tr '\n' ' ')")
  while read -r l; do summary+=("  $l"); done < <(grep -E "FAILED|Failure|differ" "$L/test_gpu.log" | head -12)
fi
if has engine; then  # the engine with the mode on (GdnGatedNorm.* assume the fused norm: left out)
  t0=$(date +%s)
  CLEF_GDN_SCAN_OUTPUT=1 timeout "${TEST_TIMEOUT:-240}" test_gpu --gtest_brief=1 \
    --gtest_filter='*Golden*:*CudaEngine*:*Packed*:*Gdn*:-GdnGatedNorm.*' > "$L/test_gpu_on.log" 2>&1
  summary+=("test_gpu (CLEF_GDN_SCAN_OUTPUT=1): rc $? in $(( $(date +%s) - t0 )) s :: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)|tests from .* ran' "$L/test_gpu_on.log" | tr '\n' ' ')")
  while read -r l; do summary+=("  $l"); done < <(grep -E "FAILED|bf16.*noise|tiny-r[23] bfloat16 \(auto\)" "$L/test_gpu_on.log" | head -12)
fi
if has wb; then
  timeout 120 workbench_gdn > "$L/workbench_gdn.txt" 2>&1; summary+=("workbench_gdn rc $?")
fi
if [ -n "$MK" ]; then
  wait $MK
  summary+=("model: $(ls $M 2>/dev/null | wc -l) files in $M")
fi
if has profile; then
  for on in 0 1; do
    echo "## CLEF_GDN_SCAN_OUTPUT=$on" >> "$L/profile.txt"
    CLEF_GDN_SCAN_OUTPUT=$on timeout 150 clefserve profile --model $M --device cuda \
      --lengths ${PROFILE_LENGTHS:-361,961,2761,5661} --runs 7 --warmup 2 >> "$L/profile.txt" 2>>"$L/misc.log"
    summary+=("text profile CLEF_GDN_SCAN_OUTPUT=$on rc $?")
  done
fi
print_summary
[ -f "$L/profile.txt" ] && grep -E "^## |^\| [0-9]" "$L/profile.txt"
[ -f "$L/workbench_gdn.txt" ] && grep -E "^\[gdn (split|gated norm|in-scan output)\] |FAIL|fail" "$L/workbench_gdn.txt" | tail -16
exit 0
