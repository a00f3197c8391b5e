#!/usr/bin/env bash
# The short closing device call of a session: every GPU test (test_gpu; the serve tests in it spawn
# build-dev/clefserve, linked here to the carried binary), then the flash-preset release and the
# in-process profile with a packed batch (`--batch`), table last. Logs under $OUT.
# Usage (repo root on the device): STEPS="tests model profile" BATCH=16 LENGTHS=340,1030 scripts/device/final_check.sh
set -uo pipefail
STEPS="${STEPS:-tests model profile}"
source scripts/device/setup.sh > /dev/null
link_binaries
M=/tmp/flash
L=$OUT
if has tests; then
  timeout "${TEST_TIMEOUT:-280}" test_gpu --gtest_brief=1 --gtest_filter="${GTEST_FILTER:--GdnTiming*}" > "$L/test_gpu.log" 2>&1
  summary+=("test_gpu: rc $? :: $(grep -E '^\[  (PASSED|FAILED)|tests from .* ran' "$L/test_gpu.log" | tr '\n' ' ')")
  while read -r l; do summary+=("  $l"); done < <(grep -E "FAILED|packed vs alone|fp8" "$L/test_gpu.log" | head -20)
fi
if has model; then
  t0=$(date +%s)
  make_release flash "$M" "$L/misc.log"
  summary+=("model: flash ready ($(( $(date +%s) - t0 )) s)")
fi
if has profile; then
  timeout 150 clefserve profile --model $M --device cuda --lengths "${LENGTHS:-340,1030}" --batch "${BATCH:-16}" \
    --runs 3 --warmup 2 > "$L/profile.txt" 2>>"$L/misc.log"
  summary+=("profile rc $?")
fi
print_summary
[ -f "$L/profile.txt" ] && cat "$L/profile.txt"
