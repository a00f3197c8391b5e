#!/usr/bin/env bash
# One device call (issue 14): where a served C16 pack's time goes. `clefserve profile --pack` times
# each of PACKS (';'-separated lists of request lengths) as one packed forward of a random release
# of PRESET (flash by default): e2e with graphs, the GEMM floor at its rows, their ratio and the eager
# stages, in each of MODES (setup.sh's mode_env: default, off, rows, noown). The default packs:
# 7 x 1000 (uniform, the bench's floor pack) and four random draws of 7 public231-shape requests
# (request tokens = state tokens + ~204; session 34, seed 7), which carry 2.5k to 11.2k tokens, mostly
# one or two long requests among short ones (PACKS= empty: none). LONE (optional, comma-separated
# lengths): each length also alone in each mode (`profile --lengths`: e2e, GEMM floor, eager stages;
# what C1 runs).
# Output: $OUT/result.txt (+ one log a mode).
# Usage (repo root on the device): [PRESET=flash] [PACKS=...] [LONE=300,1000] [MODES="default off"]
#   scripts/device/pack_profile.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
PRESET=${PRESET:-flash}
M=/tmp/$PRESET
PACKS=${PACKS-"1000,1000,1000,1000,1000,1000,1000;446,412,5538,330,303,404,345;4993,365,260,833,2442,268,362;246,279,276,800,297,295,324;3508,301,275,3864,326,2566,344"}
session_start "$PRESET"
wait "$MKP"
for mode in ${MODES:-default off}; do
  e=$(mode_env "$mode") || { echo "unknown mode $mode" | tee -a "$R"; continue; }
  env=()
  [ -n "$e" ] && env=("$e")
  echo "## $mode ($(( $(date +%s) - t0 ))s)" | tee -a "$R"
  if [ -n "$PACKS" ]; then
    env "${env[@]}" timeout 300 clefserve profile --model "$M" --device cuda --lengths "$PACKS" \
      --pack --runs "${RUNS:-3}" --warmup 1 > "$OUT/pack_$mode.log" 2>&1
    echo "rc $?" | tee -a "$R"
    grep -E '^\| [0-9]' "$OUT/pack_$mode.log" | tee -a "$R"
  fi
  if [ -n "${LONE:-}" ]; then
    echo "# alone: $LONE" | tee -a "$R"
    env "${env[@]}" timeout 200 clefserve profile --model "$M" --device cuda --lengths "$LONE" \
      --runs "${RUNS:-3}" --warmup 1 > "$OUT/lone_$mode.log" 2>&1
    echo "rc $?" | tee -a "$R"
    grep -E '^\| (tokens|[0-9])' "$OUT/lone_$mode.log" | tee -a "$R"
  fi
done
echo "elapsed $(( $(date +%s) - t0 ))s" | tee -a "$R"
exit 0
