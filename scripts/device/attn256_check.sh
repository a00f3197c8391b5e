#!/usr/bin/env bash
# One device call for the backbone's attention at head dim 256 (perf-log v17a: wg64te, key tiles
# written by attn_prep): the tests that touch it (or GTEST_FILTER), workbench_attention rows of
# w4s1 / wg64 / wg64te / wg64ote, and `clefserve profile` of text with the backbone on wg64 (CLEF_ATTN_PICK)
# and on the default pick (or PICKS), in the same build, alternated (PROFILE_ROUNDS). (The GDN
# workbenches, with carried experiment builds: gdn_check.sh STEPS=wb.) Logs in $OUT.
# Usage (repo root on the device): [STEPS="tests wb profile"] [GTEST_FILTER=...] scripts/device/attn256_check.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
STEPS=${STEPS:-tests wb profile}
start_check
if has tests; then
  t0=$(date +%s)
  F=${GTEST_FILTER:-*AttentionVariants*:KvTiles*:AttentionPick*:AttentionVariantNames*:*AttnPrep*:*Golden*:*CudaEngine*:*Packed*:*PackTables*}
  timeout "${TEST_TIMEOUT:-300}" test_gpu --gtest_brief=1 --gtest_filter="$F" > "$L/test_gpu.log" 2>&1
  summary+=("test_gpu $F: rc $? in $(( $(date +%s) - t0 )) s :: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)|tests from .* ran' "$L/test_gpu.log" | tr '\n' ' ')")
  while read -r l; do summary+=("  $l"); done < <(grep -E "FAILED|bf16.*noise|max \|dp\|" "$L/test_gpu.log" | head -16)
fi
if has wb; then
  CLEF_ATTN_VARIANT=${WB_VARIANTS:-w4s1,wg64,wg64te,wg64ote} timeout 150 workbench_attention > "$L/workbench_attention.txt" 2>&1
  summary+=("workbench_attention rc $?")
fi
wait_model
if has profile; then
  for r in $(seq 1 ${PROFILE_ROUNDS:-1}); do
    for pick in ${PICKS:-256=wg64 default}; do
      echo "## round $r pick $pick" >> "$L/profile.txt"
      if [ "$pick" = default ]; then unset CLEF_ATTN_PICK; else export CLEF_ATTN_PICK=$pick; fi
      timeout 150 clefserve profile --model $M --device cuda --lengths ${PROFILE_LENGTHS:-361,961,2761,5661} --runs 7 --warmup 2 >> "$L/profile.txt" 2>>"$L/misc.log"
      summary+=("text profile round $r pick $pick rc $?")
    done
  done
  unset CLEF_ATTN_PICK
fi
print_summary
[ -f "$L/profile.txt" ] && grep -E "^## |^\| [0-9]|attention" "$L/profile.txt" | head -60
[ -f "$L/workbench_attention.txt" ] && grep -E "hd 256|T=|causal|FAIL|fail|wg64|w4s1" "$L/workbench_attention.txt" | head -40
exit 0
