#!/usr/bin/env bash
# One device call for a merged tree: the whole test_gpu (or GTEST_FILTER), the vision and attention
# workbench rows that changed, and `clefserve profile` of media (1 x 1024^2 PNG and JPEG, 4 x 512^2
# PNG) and text (361 / 961 / 5661 tokens) with the default pick. Logs in $OUT, summary last; the flash
# release is made in the background while the tests run.
# Usage (repo root on the device): [GTEST_FILTER=...] [STEPS="tests wb_vision wb_attention wb_gdn profile"] scripts/device/session_check.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
STEPS=${STEPS:-tests wb_vision wb_attention wb_gdn profile}
start_check
if has tests; then
  t0=$(date +%s)
  timeout "${TEST_TIMEOUT:-240}" test_gpu --gtest_brief=1 --gtest_filter="${GTEST_FILTER:-*}" > "$L/test_gpu.log" 2>&1
  summary+=("test_gpu ${GTEST_FILTER:-*}: rc $? in $(( $(date +%s) - t0 )) s :: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)|tests from .* ran' "$L/test_gpu.log" | tr '\n' ' ')")
  while read -r l; do summary+=("  $l"); done < <(grep -E "FAILED|bf16.*noise|wgmma layout|media on CUDA|tiny-r[23] bfloat16 \(auto\)" "$L/test_gpu.log" | head -16)
fi
if has wb_vision; then timeout 60 workbench_vision > "$L/workbench_vision.txt" 2>&1; summary+=("workbench_vision rc $?"); fi
if has wb_attention; then
  CLEF_ATTN_VARIANT=w4s1,w4m2s1,wg64,wg64o,wg64o4,wg64o4t,wg64o4te timeout 120 workbench_attention > "$L/workbench_attention.txt" 2>&1
  summary+=("workbench_attention rc $?")
fi
if has wb_gdn; then timeout 90 workbench_gdn > "$L/workbench_gdn.txt" 2>&1; summary+=("workbench_gdn rc $?"); fi
if [ -n "$MK" ]; then
  wait $MK
  summary+=("model: $(ls $M 2>/dev/null | wc -l) files in $M")
fi
if has profile; then
  for spec in "png:1@1024x1024" "jpeg:1@1024x1024" "png:4@512x512"; do
    timeout 100 clefserve profile --model $M --device cuda --runs 5 --warmup 2 --media "${spec#*:}" \
      --media-format "${spec%%:*}" >> "$L/profile.txt" 2>>"$L/misc.log"
    summary+=("media profile $spec rc $?")
  done
  timeout 120 clefserve profile --model $M --device cuda --lengths 361,961,5661 --runs 5 --warmup 2 >> "$L/profile.txt" 2>>"$L/misc.log"
  summary+=("text profile rc $?")
fi
print_summary
[ -f "$L/profile.txt" ] && grep -E "^\| [0-9]|^media" "$L/profile.txt"
[ -f "$L/workbench_vision.txt" ] && grep -iE "patchify|rope|FAIL" "$L/workbench_vision.txt" | head -12
[ -f "$L/workbench_attention.txt" ] && grep -E "nc 1x4096|nc 4x1024| 5661 |FAIL" "$L/workbench_attention.txt" | head -12
[ -f "$L/workbench_gdn.txt" ] && grep -E "gated norm|prep|scan|output|FAIL" "$L/workbench_gdn.txt" | tail -16
exit 0
