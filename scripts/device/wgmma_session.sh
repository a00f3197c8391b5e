#!/usr/bin/env bash
# The wgmma scan's whole check in one call (perf-log v32d), for sessions whose machine starts are
# scarce: make-model (flash) in the background while the GPU tests and workbench_gdn with
# CLEF_GDN_SCAN_WGMMA 0 / 1 run (wgmma_scan_check.sh's steps); then, only if the tests passed, the
# served A/B: invariance_check.sh with TESTS=0 and MODES (default "default nowgmma": the 7 x 1000 floor
# with invariance off, one server a mode, public231-shape C1 / C16 and public231-short C64, each
# mode's C1 answers against its packs). Everything lands in $OUT/result.txt as it comes.
# FILTER / TEST_LIMIT: the tests and their time limit; WB_MODES: the workbench's CLEF_GDN_SCAN_WGMMA
# values ("0 1"; empty: no workbench).
# Usage (repo root on the device): [MODES="default nowgmma"] [RUNS="..."] [FILTER=...]
#   [TEST_LIMIT=s] [WB_MODES="..."] scripts/device/wgmma_session.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
session_start flash
gpu_tests "${FILTER:-GdnLaunch.WgmmaScan*:GdnLaunch.PackedSequencesGiveTheirBitsAlone:GdnLaunch.PackedBatches*}" \
  "${TEST_LIMIT:-90}"
passed=$(grep -c '^tests rc 0$' "$R")
P=${PACKS:-"1000x7;5000+300x6;446+412+5538+330+303+404+345;361"}
for on in ${WB_MODES-0 1}; do
  echo "## workbench_gdn CLEF_GDN_SCAN_WGMMA=$on ($(( $(date +%s) - t0 ))s)" | tee -a "$R"
  CLEF_GDN_SCAN_WGMMA=$on CLEF_BENCH_PACK="$P" timeout 60 workbench_gdn > "$OUT/wb_$on.txt" 2>&1
  echo "rc $?" | tee -a "$R"
  grep -vE '^seed|^device' "$OUT/wb_$on.txt" | tail -14 | tee -a "$R"
done
wait $MKP
if [ "$passed" = 1 ]; then
  TESTS=0 MODES=${MODES:-"default nowgmma"} scripts/device/invariance_check.sh > /dev/null 2>&1
else
  echo "tests did not pass: no served A/B" | tee -a "$R"
fi
echo "total $(( $(date +%s) - t0 ))s" | tee -a "$R"
