#!/usr/bin/env bash
# The wgmma scan in the engine (branch wip-wgmma-scan, perf-log v32c): its GPU tests, the GDN core
# a layer with it off and on (workbench_gdn, CLEF_GDN_SCAN_WGMMA), then the chain prototype's forms
# (workbench_gdn_chain). Each step time-boxed; results appended to $OUT/result.txt as they come.
# Usage (repo root on the device): [PACKS="..."] scripts/device/wgmma_scan_check.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
R=$OUT/result.txt
nvidia-smi -L | tee -a "$R"
mkdir -p build-dev build-gpu && ln -sf /tmp/c/bin/clefserve build-dev/clefserve &&
  ln -sf /tmp/c/bin/clefserve build-gpu/clefserve
gpu_tests 'GdnLaunch.WgmmaScan*:GdnLaunch.PackedSequencesGiveTheirBitsAlone:GdnLaunch.PackedBatches*' 90
grep -E '^\[gdn wgmma' "$OUT/tests.log" | tee -a "$R"
P=${PACKS:-"1000x7;5000+300x6;446+412+5538+330+303+404+345;361"}
for on in 0 1; do
  echo "## workbench_gdn CLEF_GDN_SCAN_WGMMA=$on" | tee -a "$R"
  CLEF_GDN_SCAN_WGMMA=$on CLEF_BENCH_PACK="$P" timeout 60 workbench_gdn > "$OUT/wb_$on.txt" 2>&1
  echo "rc $?" | tee -a "$R"
  grep -vE '^seed|^device' "$OUT/wb_$on.txt" | tail -14 | tee -a "$R"
done
timeout 40 workbench_gdn_chain 2>&1 | grep -E 'solo|MISMATCH' | tee -a "$R"
