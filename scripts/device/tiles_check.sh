#!/usr/bin/env bash
# Session 13's key-tiled attention (perf-log v14a/b), one device call: the tests that touch it, the
# attention and vision workbench rows, Nsight Compute on wg64o4t, and the 1024^2 JPEG request with
# each tower kernel (CLEF_ATTN_PICK). Logs in $OUT, a short table last.
# Usage (repo root on the device): [PICKS="wg64o4 wg64o4t wg64o4te"] [NCU=1] [NCU_VARIANT=wg64o4te NCU_KV=2]
#   scripts/device/tiles_check.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
M=/tmp/flash L=$OUT
( [ -d $M ] || clefserve make-model --preset flash --force --out $M --tokenizer tests/golden/tokenizers/qwen3 > "$L/misc.log" 2>&1 ) &
MK=$!
timeout 300 test_gpu --gtest_brief=1 --gtest_filter='*AttentionVariants*:KvTiles*:AttentionPick*:AttentionVariantNames*:*RopeSplit*:CudaMediaEngine*:VisionKernels*:SegmentAttention*' > "$L/test_gpu.log" 2>&1
echo "test_gpu rc $?: $(grep -E '^\[  (PASSED|FAILED)|tests from .* ran' "$L/test_gpu.log" | tr '\n' ' ')" > "$L/summary.txt"
grep -E "FAILED|media on CUDA" "$L/test_gpu.log" | head -12 >> "$L/summary.txt"
CLEF_ATTN_VARIANT=wg64o4,wg64o4t,wg64o4te timeout 120 workbench_attention > "$L/workbench.txt" 2>&1
timeout 60 workbench_vision >> "$L/workbench.txt" 2>&1
if [ "${NCU:-1}" = 1 ]; then
  # (the SASS goes to /tmp: at most 8 files come back)
  OUT=/tmp KERNEL=flash_wgmma_kernelILi72ELi64ELb0ELb1ELi4ELi${NCU_KV:-2}E VARIANT=${NCU_VARIANT:-wg64o4te} \
    timeout 200 scripts/device/ncu_attention.sh > "$L/ncu_attention.txt" 2>&1
fi
wait $MK
for p in ${PICKS:-wg64o4 wg64o4t wg64o4te}; do
  CLEF_ATTN_PICK=72=$p timeout 60 clefserve profile --model $M --device cuda --runs 7 --warmup 2 \
    --media 1@1024x1024 --media-format jpeg > "$L/profile_$p.txt" 2>&1
  echo "$p: $(grep -E '^\| 1217' "$L/profile_$p.txt") $(grep -oE 'vision\.(attention|elementwise) [0-9.]+' "$L/profile_$p.txt" | tr '\n' ' ')" >> "$L/summary.txt"
done
cat "$L/summary.txt"
grep -E "nc 1x4096|nc 4x1024|FAIL" "$L/workbench.txt" | grep -vE "f32" | head -12
grep -E "rope" "$L/workbench.txt" | head -6
grep -E "Duration|Throughput|Pipe|Issue Slots|Stall|Warp Cycles|Bank|L2 Hit|lts__|Registers" "$L/ncu_attention.txt" 2>/dev/null | head -40
