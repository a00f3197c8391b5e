#!/usr/bin/env bash
# Hardware counters of one attention kernel launch at the tower's shape (one 4096-row segment, 16
# heads, head dim 72, non-causal): pipe utilisation, stall reasons, shared-memory traffic and the
# hottest SASS lines (device call). KERNEL is a regex on the mangled name (default: the Hopper
# kernel at 72, non-causal, overlapped); VARIANT the workbench variant that launches it.
# Usage (repo root on the device): [KERNEL=...] [VARIANT=wg64o] scripts/device/ncu_attention.sh > $OUT/ncu_attention.txt
set -uo pipefail
# setup.sh unpacks the binaries and exports their library path; a script that sourced it already
# passes both on.
[[ -x /tmp/c/bin/workbench_attention && ":${LD_LIBRARY_PATH:-}:" == *:/tmp/c/lib:* ]] ||
  source scripts/device/setup.sh > /dev/null
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
# The text rows run first (CLEF_BENCH_T=64 keeps them short); skip the check and warm-up launches.
CLEF_BENCH_T=64 CLEF_BENCH_SKIP_CHECK=1 CLEF_ATTN_VARIANT=${VARIANT:-wg64o} "$NCU" --clock-control none \
  --kernel-name-base mangled --kernel-name regex:"${KERNEL:-flash_wgmma_kernelILi72ELi64ELb0ELb1E}" \
  --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --section WarpStateStats \
  --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section SourceCounters \
  --section InstructionStats --section SchedulerStats --print-details all \
  /tmp/c/bin/workbench_attention 2>&1 | grep -vE "^==PROF==|^\s*$" | cut -c1-170
# SASS of the kernel (where the toolkit has a disassembler): the main loop's instruction mix.
CO=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null | head -1)
if [ -n "$CO" ]; then
  "$CO" -sass /tmp/c/bin/workbench_attention 2>/dev/null |
    awk -v k="${KERNEL:-flash_wgmma_kernelILi72ELi64ELb0ELb1E}" '/Function : /{p = ($0 ~ k)} p' > "${OUT:-/tmp}/attention.sass"
  echo "sass: $(wc -l < "${OUT:-/tmp}/attention.sass") lines in attention.sass"
else
  echo "no cuobjdump on this machine"
fi
