#!/usr/bin/env bash
# One device call for the kernel variants of session 10 (docs/perf-log.md v11b/v11c): the GPU tests
# of the new kernels, both workbenches, then the attention variant each workbench table says is
# fastest (vision: non-causal 1x4096 at head dim 80; backbone: causal head dim 256, summed over
# T 961/2761/5661) tried inside the engine through CLEF_ATTN_PICK: the engine tests under that pick,
# and `clefserve profile` (media and text) with the default pick and with it. Logs in $OUT, summary
# last. The flash release is made in the background while the tests run.
# Usage (repo root on the device): scripts/device/tune_check.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
link_binaries
M=/tmp/flash
L=$OUT
summary=()
( [ -d $M ] || clefserve make-model --preset flash --force --out $M --tokenizer tests/golden/tokenizers/qwen3 > "$L/misc.log" 2>&1 ) &
MK=$!
t0=$(date +%s)
timeout "${TEST_TIMEOUT:-200}" test_gpu --gtest_brief=1 --gtest_filter="${GTEST_FILTER:-VisionKernels*:GemmModule.*:Fp8Gemm.*:CudaMediaEngine.*:*AttentionVariant*:*AttentionCore*:*SegmentAttention*:*Packing*}" > "$L/test_gpu.log" 2>&1
summary+=("test_gpu (new kernels): rc $? in $(( $(date +%s) - t0 )) s :: $(grep -E '^\[  (PASSED|FAILED)|tests from .* ran' "$L/test_gpu.log" | tr '\n' ' ')")
while read -r l; do summary+=("  $l"); done < <(grep -E "FAILED|GPU tower|bf16.*noise|max \|dp\|" "$L/test_gpu.log" | head -16)
t0=$(date +%s)
timeout 150 workbench_attention > "$L/workbench.txt" 2>&1
summary+=("workbench_attention rc $? in $(( $(date +%s) - t0 )) s")
timeout 60 workbench_vision >> "$L/workbench.txt" 2>&1
summary+=("workbench_vision rc $?")
read -r P80 P256 < <(python3 - "$L/workbench.txt" <<'PY'
import re, sys
nc, causal = {}, {}
for line in open(sys.argv[1]):
    m = re.match(r'^attention\s+bf16 (w\S+)( nc 1x4096| nc 4x1024)?\s+(\d+)\s+([\d.]+)', line)
    if not m:
        continue
    name, shape, tokens, us = m.group(1), m.group(2), int(m.group(3)), float(m.group(4))
    if shape == ' nc 1x4096':
        nc[name] = us
    elif shape is None and tokens in (961, 2761, 5661):
        causal[name] = causal.get(name, 0.0) + us
print(min(nc, key=nc.get) if nc else 'w4s1', min(causal, key=causal.get) if causal else 'w4s1')
PY
)
PICK="80=$P80,256=$P256"
summary+=("fastest in the workbench: $PICK")
wait $MK
summary+=("model: flash ready")
t0=$(date +%s)
CLEF_ATTN_PICK=$PICK timeout 150 test_gpu --gtest_brief=1 --gtest_filter="${PICK_FILTER:-CudaMediaEngine.*:*PackedBatches*:Tiny/CudaEngineGolden.*}" > "$L/test_pick.log" 2>&1
summary+=("test_gpu under CLEF_ATTN_PICK=$PICK: rc $? in $(( $(date +%s) - t0 )) s :: $(grep -E '^\[  (PASSED|FAILED)|tests from .* ran' "$L/test_pick.log" | tr '\n' ' ')")
while read -r l; do summary+=("  $l"); done < <(grep -E "FAILED|bf16.*noise|max \|dp\|" "$L/test_pick.log" | head -10)
run_profiles() {  # tag, CLEF_ATTN_PICK value, media formats
  local tag=$1 pick=$2 fmt
  for fmt in $3; do
    CLEF_ATTN_PICK=$pick timeout 100 clefserve profile --model $M --device cuda --runs 5 --warmup 2 \
      --media "${MEDIA:-1@1024x1024,4@512x512}" --media-format $fmt >> "$L/profile_$tag.txt" 2>>"$L/misc.log"
    summary+=("media profile ($tag, $fmt) rc $?")
  done
  CLEF_ATTN_PICK=$pick timeout 100 clefserve profile --model $M --device cuda --lengths "${LENGTHS:-361,961,5661}" --runs 5 --warmup 2 \
    >> "$L/profile_$tag.txt" 2>>"$L/misc.log"
  summary+=("text profile ($tag) rc $?")
}
run_profiles default "" png
run_profiles pick "$PICK" "png jpeg"
print_summary
for f in "$L"/profile_*.txt; do
  echo "--- $(basename $f)"
  grep -E "^\| [0-9]|^media:|^clefserve profile" "$f"
done
grep -E "^attention .*(nc 1x4096|nc 4x1024| 961 | 5661 )" "$L/workbench.txt" | head -60
grep -iE "^vision|layer_norm|rope|gelu|fc1" "$L/workbench.txt" | head -24
