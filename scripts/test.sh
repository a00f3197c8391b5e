#!/usr/bin/env bash
# The project's test command (README, .ci/run): unit + golden + HTTP tests on the release build
# (with the playground's headless-chromium test, ctest label browser: it fails under CI=true when
# chromium, chromium-driver or python3-selenium is missing, and is skipped elsewhere),
# a 60 s mixed-abuse soak of the server (tests/server/soak.py, SOAK_SECONDS), the replica failover
# test behind HAProxy (tests/deploy/failover.py, ~40 s), the same tests under
# ASan+UBSan, then time-boxed libFuzzer runs. GPU tests (label gpu) run on the device only.
# CLEF_TEST_QUICK=1 runs only the release-build tests (for development).
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache keys on paths relative to the checkout, so a fresh clone elsewhere reuses earlier compiles.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}" CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
JOBS="${JOBS:-$(nproc)}"
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"

if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCLEF_CUDA="${CLEF_CUDA:-AUTO}"
fi
cmake --build build -j "$JOBS"
(cd build && ctest -LE gpu --output-on-failure -j "$JOBS")
[ "${CLEF_TEST_QUICK:-0}" = 1 ] && exit 0

echo "== soak: ${SOAK_SECONDS:-60}s of mixed HTTP abuse (slowloris, oversized and malformed requests, hang-ups, pipelined garbage) vs one normal client: 0 failures, p99 bound, RSS < 1 GiB ==" >&2
python3 tests/server/soak.py build/clefserve

echo "== failover: 3 replicas behind HAProxy (deploy/haproxy.cfg), bench at concurrency 8, one replica drained (SIGTERM), one SIGKILLed and restarted: 0 failed requests, answers identical ==" >&2
python3 tests/deploy/failover.py build/clefserve

echo "== sanitizer build (ASan+UBSan) ==" >&2
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCLEF_CUDA=OFF -DCLEF_SANITIZE=ON \
  -DCLEF_MICROBENCH=OFF >/dev/null
cmake --build build-asan -j "$JOBS"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest -LE gpu --output-on-failure -j "$JOBS")

echo "== fuzzing (${FUZZ_SECONDS}s per target) ==" >&2
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCLEF_CUDA=OFF \
  -DCLEF_FUZZ=ON -DCLEF_TESTS=OFF -DCLEF_MICROBENCH=OFF >/dev/null
cmake --build build-fuzz -j "$JOBS"
for f in build-fuzz/fuzz/fuzz_*; do
  [ -x "$f" ] || continue
  name=$(basename "$f"); corpus="fuzz/corpus/${name#fuzz_}"
  work=$(mktemp -d); [ -d "$corpus" ] && cp -r "$corpus"/. "$work"/
  echo "fuzz: $name" >&2
  "$f" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=4096 -print_final_stats=1 "$work" 2>&1 | tail -n 12
  rm -rf "$work"
done
echo "all tests, sanitizer tests and fuzzing passed"
