#!/usr/bin/env bash
# One device call for the GDN scan's progress counts (perf-log v31): STEPS of
#   tests   the launch-form, golden and packed GPU tests (FILTER),
#   wb      workbench_gdn's packs WB_PACKS (whole core with and without the counts; the five
#           forms' y compared),
#   profile `clefserve profile --pack` of PACKS in MODES (default, noprogress; pack_profile.sh),
#   serve   ab_check.sh's served A/B: the floor from a 7 x 1000 packed forward with
#           CLEF_BATCH_INVARIANT=0, then the default server and CLEF_GDN_SCAN_PROGRESS=0 one
#           after another (one GEMM tuning cache) at CS / SHORT_CS.
# Output: $OUT/result.txt (+ ab_check's summary on stdout), logs beside it.
# Usage (repo root on the device): [STEPS="tests wb profile serve"] scripts/device/progress_check.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
STEPS=${STEPS:-tests wb profile}
R=$OUT/result.txt
( make_release flash /tmp/flash "$OUT/make_model.log" ) &
MK=$!
if has tests; then
  gpu_tests "${FILTER:-GdnLaunch.*:*CudaEngineGolden*:*Packed*:GdnCoreChoice.*}" "${TEST_LIMIT:-240}"
fi
if has wb; then
  WB_PACKS=${WB_PACKS:-"1000x7;5000+300x6;2000+1000x4+500x6;330x28;446+412+5538+330+303+404+345"}
  CLEF_BENCH_PACK="$WB_PACKS" timeout 150 workbench_gdn > "$OUT/workbench_gdn.txt" 2>&1
  echo "workbench_gdn rc $?" | tee -a "$R"
  grep -E "^\[gdn pack\].*(whole core|differs)" "$OUT/workbench_gdn.txt" |
    sed -E 's/ \(x24.*split \(no counts\)/; split/' | tee -a "$R"
fi
wait $MK
echo "model: $(ls /tmp/flash 2>/dev/null | wc -l) files" | tee -a "$R"
if has profile; then
  MODES=${MODES:-"default noprogress"} RUNS=${RUNS:-5} bash scripts/device/pack_profile.sh > /dev/null 2>&1
fi
cat "$R"
if has serve; then
  STEPS="batch serve" BINS=clefserve BATCH_SETS="7:1000" BATCH_BINS="clefserve:CLEF_BATCH_INVARIANT=0" \
    BENCH_FLOOR=batch SERVE_BINS=${SERVE_BINS:-"clefserve clefserve:CLEF_GDN_SCAN_PROGRESS=0"} \
    CS=${CS:-16} SHORT_CS=${SHORT_CS:-64} TRAV=${TRAV:-2} bash scripts/device/ab_check.sh
fi
