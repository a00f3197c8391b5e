#!/usr/bin/env bash
# One device call for the GDN scan's progress counts (perf-log v31a): the launch-form, golden and
# packed GPU tests (TESTS=0 skips), workbench_gdn's packs (whole core with and without the counts,
# the five forms' y compared), then `clefserve profile --pack` of PACKS in MODES (default,
# noprogress) through pack_profile.sh. Output: $OUT/result.txt, logs beside it.
# Usage (repo root on the device): [TESTS=0] [WB_PACKS=...] [PACKS=...] [MODES=...]
#   scripts/device/progress_check.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
R=$OUT/result.txt
( make_release flash /tmp/flash "$OUT/make_model.log" ) &
MK=$!
if [ "${TESTS:-1}" != 0 ]; then
  gpu_tests "${FILTER:-GdnLaunch.*:*CudaEngineGolden*:*Packed*:GdnCoreChoice.*}" "${TEST_LIMIT:-240}"
fi
WB_PACKS=${WB_PACKS:-"1000x7;5000+300x6;2000+1000x4+500x6;330x28;446+412+5538+330+303+404+345"}
CLEF_BENCH_PACK="$WB_PACKS" timeout 150 workbench_gdn > "$OUT/workbench_gdn.txt" 2>&1
echo "workbench_gdn rc $?" | tee -a "$R"
grep -E "^\[gdn pack\].*(whole core|differs)" "$OUT/workbench_gdn.txt" |
  sed -E 's/ \(x24.*split \(no counts\)/; split/' | tee -a "$R"
wait $MK
echo "model: $(ls /tmp/flash 2>/dev/null | wc -l) files" | tee -a "$R"
MODES=${MODES:-"default noprogress"} RUNS=${RUNS:-5} bash scripts/device/pack_profile.sh > /dev/null 2>&1
cat "$OUT/result.txt"
