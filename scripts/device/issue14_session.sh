#!/usr/bin/env bash
# Issue 14's served table and the fused GDN core's deciding counters in one call (perf-log v35 and
# "v33 weighed again"): invariance_check.sh on the default server with every run the issue asks for
# (public231-shape at C1 / C4 / C16 / C64, public231-short at C16 / C64, the floor, the C1-vs-packs
# compares), then Nsight Compute on the packed 7 x 1000 GDN kernels (ncu_gdn.sh: issue, tensor and
# stall sections of prep, scan and output; session 43's are in perf-log "v35 again").
# Everything lands in $OUT/result.txt (ncu's report in $OUT/ncu_gdn.txt). About 4 minutes on a
# fresh H100 (session 43: served 200 s, ncu 20 s); give it the call's full 600 s anyway.
# Usage (repo root on the device): [RUNS="..."] [NCU=0]
#   scripts/device/issue14_session.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
session_start
TESTS=0 MODES=default RUNS=${RUNS:-"public231-shape:1 public231-shape:4 public231-shape:16 \
public231-shape:64 public231-short:16 public231-short:64"} scripts/device/invariance_check.sh \
  > /dev/null 2>&1
if [ "${NCU:-1}" = 1 ]; then
  echo "## ncu, packed 7 x 1000 GDN kernels ($(( $(date +%s) - t0 ))s)" | tee -a "$R"
  PACK=1000x7 timeout 120 scripts/device/ncu_gdn.sh > "$OUT/ncu_gdn.txt" 2>&1
  echo "ncu rc $?" | tee -a "$R"
  grep -E "^  [a-z_]+kernel|Duration|Executed Ipc Active|Issue Slots Busy|Compute \(SM\) Throughput|\
DRAM Throughput|Warp Cycles Per Issued|Achieved Occupancy" "$OUT/ncu_gdn.txt" | head -40 | tee -a "$R"
fi
echo "total $(( $(date +%s) - t0 ))s" | tee -a "$R"
