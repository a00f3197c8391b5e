#!/usr/bin/env bash
# The kernel workbench (dev/cuda/README.md) on the device: every family's checks and timing table.
# Logs: $OUT/workbench_<family>.log; a status line per program at the end.
# Usage (from the repo root on the device): [FAMILIES="norm gdn"] scripts/device/workbench.sh
set -uo pipefail
FAMILIES="${FAMILIES:-norm gdn_prep attn_prep elementwise gdn attention}"
[ -x /tmp/c/bin/workbench_norm ] || source scripts/device/setup.sh > /dev/null
export LD_LIBRARY_PATH=/tmp/c/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
L=${OUT:-/tmp/workbench}
mkdir -p "$L"
summary=()
for f in $FAMILIES; do
  bin=/tmp/c/bin/workbench_$f
  [ -x "$bin" ] || bin=build/dev/cuda/workbench_$f
  if [ ! -x "$bin" ]; then
    summary+=("workbench_$f: missing")
    continue
  fi
  timeout 300 "$bin" > "$L/workbench_$f.log" 2>&1
  rc=$?
  grep -vE '^check ' "$L/workbench_$f.log"
  summary+=("workbench_$f: rc $rc, $(grep -c ' ok$' "$L/workbench_$f.log") checks ok, $(grep -c 'MISMATCH' "$L/workbench_$f.log") mismatches")
done
echo "================ WORKBENCH ================"
for s in "${summary[@]}"; do echo "$s"; done
