#!/usr/bin/env bash
# Per-kernel hardware counters of the chunked-GDN kernels at one length (device call), with the
# memory tables (which unit's traffic bounds the scan: perf-log v15c).
# Usage (repo root on the device): T=5661 | PACK=1000x7 scripts/device/ncu_gdn.sh > $OUT/ncu_gdn.txt
# (other variables, e.g. CLEF_GDN_SCAN_NT=4, pass through to the workbench).
set -uo pipefail
# setup.sh unpacks the binaries and exports their library path; a script that sourced it already
# passes both on.
[[ -x /tmp/c/bin/workbench_gdn && ":${LD_LIBRARY_PATH:-}:" == *:/tmp/c/lib:* ]] ||
  source scripts/device/setup.sh > /dev/null
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
# T mode: the tensor-core path runs first: skip its two warm-up repetitions (3 kernels each),
# profile one. PACK mode (CLEF_BENCH_PACK, e.g. PACK=1000x7): per launch form 32 launches of each
# kernel (2 warm-up, 20 timed, 10 split); the packed default (longest first, one CTA an SM, the
# process's progress counts) is the fifth of dev/cuda/gdn.cu's five forms: its prep, scan and output
# of launch 130.
# With CLEF_GDN_FUSED=1 (packs only) a launch is two kernels, prep and fused_kernel.
k=3; [ "${CLEF_GDN_FUSED:-}" = 1 ] && [ -n "${PACK:-}" ] && k=2
if [ -n "${PACK:-}" ]; then mode=(CLEF_BENCH_PACK="$PACK"); skip=$((130 * k)); else mode=(CLEF_BENCH_T="${T:-5661}"); skip=6; fi
env "${mode[@]}" CLEF_BENCH_SKIP_CHECK=1 "$NCU" --clock-control none \
  --kernel-name regex:"prep_kernel|scan_kernel|output_kernel|fused_kernel" --launch-skip $skip --launch-count $k \
  --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section MemoryWorkloadAnalysis_Tables --section SourceCounters --section InstructionStats \
  --section SchedulerStats --print-details all \
  /tmp/c/bin/workbench_gdn 2>&1 | grep -vE "^==PROF==|^\s*$" | cut -c1-160
