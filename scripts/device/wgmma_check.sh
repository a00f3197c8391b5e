#!/usr/bin/env bash
# One device call for the Hopper attention kernel (attention/flash_wgmma.cu, variants wg64/wg128):
# the descriptor-convention probe first, alone (a wrong convention could fault and would take the
# other tests' process with it), then the attention tests, the workbench (all variants, or
# CLEF_ATTN_VARIANT), the engine tests and `clefserve profile` (text, media) with the default
# attention pick and with PICK (default "72=wg64o,256=wg64"). Logs in $OUT, summary last. The flash
# release is made in the background meanwhile.
# Usage (repo root on the device): [PICK=...] [STEPS="probe tests bench engine profile"] scripts/device/wgmma_check.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
STEPS=${STEPS:-probe tests bench engine profile}
M=/tmp/flash
L=$OUT
PICK=${PICK:-72=wg64o,256=wg64}
( [ -d $M ] || clefserve make-model --preset flash --force --out $M --tokenizer tests/golden/tokenizers/qwen3 > "$L/misc.log" 2>&1 ) &
MK=$!
gt() {  # tag, filter, [env...]: one test_gpu process; its pass line into the summary
  local tag=$1 filter=$2 t0=$(date +%s)
  shift 2
  env "$@" timeout "${TEST_TIMEOUT:-240}" test_gpu --gtest_brief=1 --gtest_filter="$filter" > "$L/test_$tag.log" 2>&1
  local rc=$?
  summary+=("test_gpu $tag: rc $rc in $(( $(date +%s) - t0 )) s :: $(grep -E '^\[  (PASSED|FAILED)|tests from .* ran' "$L/test_$tag.log" | tr '\n' ' ')")
  while read -r l; do summary+=("  $l"); done < <(grep -E "FAILED|wgmma layout|bf16.*noise|max \|dp\|" "$L/test_$tag.log" | head -12)
  return $rc
}
OK=1
if has probe; then gt probe 'WgmmaAttention.*' || OK=0; fi
if has tests && [ $OK = 1 ]; then gt attention '*AttentionVariant*:*AttentionCore*:AttentionPick.*:*SegmentAttention*:SegmentTiles.*:PackTables.*:*Packing*:VisionKernels/*.RopeSplit*'; fi
if has bench; then
  t0=$(date +%s)
  if [ $OK = 1 ]; then timeout 200 workbench_attention > "$L/workbench.txt" 2>&1
  else CLEF_ATTN_VARIANT=w4s1,w4m2s1 timeout 200 workbench_attention > "$L/workbench.txt" 2>&1; fi
  summary+=("workbench_attention rc $? in $(( $(date +%s) - t0 )) s")
  timeout 60 workbench_vision > "$L/workbench_vision.txt" 2>&1
  summary+=("workbench_vision rc $?")
fi
wait $MK
summary+=("model: $(ls $M 2>/dev/null | wc -l) files in $M")
if has engine && [ $OK = 1 ]; then
  gt engine_pick 'CudaMediaEngine.*:*PackedBatches*:Tiny/CudaEngineGolden.*:*NoOneTimeWork*' CLEF_ATTN_PICK=$PICK
fi
run_profiles() {  # tag, CLEF_ATTN_PICK value
  local tag=$1 pick=$2 fmt
  for fmt in ${FORMATS:-png jpeg}; do
    CLEF_ATTN_PICK=$pick timeout 100 clefserve profile --model $M --device cuda --runs 5 --warmup 2 \
      --media "${MEDIA:-1@1024x1024}" --media-format $fmt >> "$L/profile_$tag.txt" 2>>"$L/misc.log"
    summary+=("media profile ($tag, $fmt) rc $?")
  done
  CLEF_ATTN_PICK=$pick timeout 120 clefserve profile --model $M --device cuda --lengths "${LENGTHS:-361,961,5661}" --runs 5 --warmup 2 \
    >> "$L/profile_$tag.txt" 2>>"$L/misc.log"
  summary+=("text profile ($tag) rc $?")
}
if has profile; then
  run_profiles default ""
  [ $OK = 1 ] && run_profiles pick "$PICK"
fi
print_summary
for f in "$L"/profile_*.txt; do
  [ -f "$f" ] || continue
  echo "--- $(basename $f)"
  grep -E "^\| [0-9]|^media|tower|prepare" "$f" | head -30
done
[ -f "$L/workbench.txt" ] && grep -E "^attention .*(auto|w4s1|w4m2s1|wg64).*(nc 1x4096|nc 4x1024| 961 | 5661 )|FAIL|mismatch" "$L/workbench.txt" | head -40
[ -f "$L/workbench_vision.txt" ] && grep -iE "rope|FAIL" "$L/workbench_vision.txt" | head -8
