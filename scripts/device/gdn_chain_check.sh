#!/usr/bin/env bash
# workbench_gdn_chain (dev/cuda/gdn_chain.cu, the wgmma scan prototype): its check and times, and
# per kernel the warpgroup MMAs and warpgroup waits / arrives in its SASS (waits between the
# MMAs of a product would serialise them). Results in $OUT/result.txt.
# Usage (repo root on the device): scripts/device/gdn_chain_check.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
R=$OUT/result.txt
nvidia-smi -L | tee -a "$R"
timeout 150 workbench_gdn_chain 2>&1 | grep -v '^seed' | tee -a "$R"
cuobjdump -sass /tmp/c/bin/workbench_gdn_chain > /tmp/sass.txt 2>&1
awk '/Function :/ {f = $3} /HGMMA/ {h[f]++} /WARPGROUP.DEPBAR/ {d[f]++}
  /WARPGROUP.ARRIVE/ {a[f]++} END {for (k in h) print k, "HGMMA", h[k], "DEPBAR", d[k] + 0,
  "ARRIVE", a[k] + 0}' /tmp/sass.txt | tee -a "$R"
