#!/usr/bin/env bash
# Per-kernel hardware counters of the chunked-GDN kernels at one length (device call), with the
# memory tables (which unit's traffic bounds the scan: perf-log v15c).
# Usage (repo root on the device): T=5661 scripts/device/ncu_gdn.sh > $OUT/ncu_gdn.txt
set -uo pipefail
[ -x /tmp/c/bin/workbench_gdn ] || source scripts/device/setup.sh > /dev/null
export LD_LIBRARY_PATH=/tmp/c/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
# The tensor-core path runs first: skip its two warm-up repetitions (3 kernels each), profile one.
CLEF_BENCH_T=${T:-5661} CLEF_BENCH_SKIP_CHECK=1 "$NCU" --clock-control none \
  --kernel-name regex:"prep_kernel|scan_kernel|output_kernel" --launch-skip 6 --launch-count 3 \
  --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
  --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section SourceCounters --section InstructionStats \
  --section SchedulerStats --print-details all \
  /tmp/c/bin/workbench_gdn 2>&1 | grep -vE "^==PROF==|^\s*$" | cut -c1-160
