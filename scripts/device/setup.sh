#!/usr/bin/env bash
# Sourced at the start of every device call: unpacks the carried binaries and shared libraries
# (.devcarry/pkg.tar.xz, built here for sm_90a) and makes CLEF_SOURCE_DIR (/work/main) resolve to this
# checkout, so the GPU tests find tests/golden.
mkdir -p /tmp/c && tar xJf .devcarry/pkg.tar.xz -C /tmp/c
CUBLAS_DIR=$(dirname "$(ls /usr/local/cuda/lib64/libcublasLt.so.13 2>/dev/null || find / -name 'libcublasLt.so.13' -not -path '/proc/*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=/tmp/c/lib:${CUBLAS_DIR}:${LD_LIBRARY_PATH:-}
export PATH=/tmp/c/bin:$PATH
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
echo "cublasLt from ${CUBLAS_DIR}"
ldd /tmp/c/bin/clefserve | grep "not found" && echo "MISSING LIBS" || echo "libs ok"
# The check scripts' step helpers: `has STEP` (is STEP in $STEPS, read when called), the summary
# lines they collect, and print_summary (the block they end with).
has() { [[ " $STEPS " == *" $1 "* ]]; }
summary=()
print_summary() {
  echo "================ SUMMARY ================"
  local s
  for s in "${summary[@]}"; do echo "$s"; done
}
# mode_env MODE: the environment assignment an issue-14 check mode stands for, on stdout (empty for
# "default"): off (CLEF_BATCH_INVARIANT=0), rows (CLEF_KV_SEQ_TILES=0: packs read K and V by rows,
# wg64, not per-sequence key tiles), noown (CLEF_GEMM_OWN_CANDIDATES=0: each M's GEMM candidates
# from the class probes only), noswiglu (CLEF_SWIGLU_GEMM=0: cuBLASLt gate_up + swiglu at every
# M), noprogress (CLEF_GDN_SCAN_PROGRESS=0: the GDN output kernel waits for the whole scan), nowgmma
# (CLEF_GDN_SCAN_WGMMA=0: the GDN scan's chain on mma.sync, as before perf-log v32d), exact
# (CLEF_EXACT_ROWS_FROM=4096: packs of the 4096-token buckets and up at their exact rows, eagerly,
# perf-log v40; off by default), exact2k (CLEF_EXACT_ROWS_FROM=2048: the same from 2048 on).
# Status 1 for an unknown mode.
mode_env() {
  case $1 in
    default) echo "" ;;
    off) echo "CLEF_BATCH_INVARIANT=0" ;;
    rows) echo "CLEF_KV_SEQ_TILES=0" ;;
    noown) echo "CLEF_GEMM_OWN_CANDIDATES=0" ;;
    noswiglu) echo "CLEF_SWIGLU_GEMM=0" ;;
    noprogress) echo "CLEF_GDN_SCAN_PROGRESS=0" ;;
    nowgmma) echo "CLEF_GDN_SCAN_WGMMA=0" ;;
    exact) echo "CLEF_EXACT_ROWS_FROM=4096" ;;
    exact2k) echo "CLEF_EXACT_ROWS_FROM=2048" ;;
    *) return 1 ;;
  esac
}
# gpu_tests FILTER LIMIT: test_gpu's tests matching FILTER, stopped after LIMIT s (log
# $OUT/tests.log); "tests rc N" and the summary lines (passed / failed / skipped counts, failures,
# the packed-vs-alone and own-candidate lines the tests print) appended to $R, the caller's result
# file.
gpu_tests() {
  timeout "$2" test_gpu --gtest_brief=1 --gtest_filter="$1" > "$OUT/tests.log" 2>&1
  echo "tests rc $?" | tee -a "$R"
  grep -E '^\[  (PASSED|FAILED|SKIPPED)|FAILED|Failure|packed vs alone|joined|of [0-9]+ values' \
    "$OUT/tests.log" | head -24 | tee -a "$R"
}
# make_release PRESET DIR LOG: a random release of PRESET (make-model, the Qwen3 tokenizer) in DIR
# unless one is there already (a warm machine keeps /tmp), make-model's output in LOG; its status.
# DIR appears only once complete (made as DIR.partial, then renamed); a second caller while one is
# making it waits for that one instead of taking the half-written folder.
make_release() {
  [ -d "$2" ] && return 0
  if mkdir "$2.lock" 2> /dev/null; then
    rm -rf "$2.partial"
    clefserve make-model --preset "$1" --force --out "$2.partial" \
      --tokenizer tests/golden/tokenizers/qwen3 > "$3" 2>&1 && mv "$2.partial" "$2"
    local rc=$?
    rmdir "$2.lock"
    return $rc
  fi
  while [ -d "$2.lock" ]; do sleep 1; done
  [ -d "$2" ]
}
# link_binaries: the carried clefserve where the serve tests start it (tests/server/
# server_process.cpp looks in the checkout's build folders).
link_binaries() {
  mkdir -p build-dev build-gpu && ln -sf /tmp/c/bin/clefserve build-dev/clefserve &&
    ln -sf /tmp/c/bin/clefserve build-gpu/clefserve
}
# session_start [PRESET]: the common start of the one-call device scripts (wgmma_session.sh,
# issue14_session.sh, invariance_check.sh, closing_check.sh, pack_profile.sh): R ($OUT/result.txt,
# where they append as results come) and t0, the GPU's name in R (once: a script started by another
# shares its R), the serve tests' binary links, and with a PRESET `make-model --preset PRESET` into
# /tmp/PRESET in the background (MKP = its pid, "model rc" in R when done; empty without PRESET).
session_start() {
  R=$OUT/result.txt
  t0=$(date +%s)
  grep -q '^GPU ' "$R" 2>/dev/null || nvidia-smi -L | tee -a "$R"
  MKP=
  if [ -n "${1:-}" ]; then
    ( make_release "$1" "/tmp/$1" "$OUT/make_model.log"
      echo "model rc $? ($(( $(date +%s) - t0 ))s)" >> "$R" ) &
    MKP=$!
  fi
  link_binaries
}
# The check scripts' common start: the serve tests' binary links (tests/server/server_process.cpp
# starts it from the checkout's build folders), M (the flash release folder), L (the logs, $OUT),
# and when `profile` is a step `make-model --preset flash` into M in the background (MK = its pid,
# empty otherwise; the caller waits before profiling).
start_check() {
  link_binaries
  M=/tmp/flash
  L=$OUT
  MK=
  if has profile; then
    ( make_release flash "$M" "$L/misc.log" ) &
    MK=$!
  fi
}
# wait_model: waits for start_check's make-model (if it started one) and notes the folder in the
# summary.
wait_model() {
  [ -n "$MK" ] || return 0
  wait $MK
  summary+=("model: $(ls $M 2>/dev/null | wc -l) files in $M")
}
# serve_decide LABEL PORT MANIFEST TIMEOUT TRIES SERVE_ARGS...: `clefserve serve SERVE_ARGS --port
# PORT` (log $OUT/serve_LABEL.log), its /health polled TRIES times 0.5 s apart (saved as
# /tmp/health_LABEL.json) unless it exits, one `clefserve bench` pass of MANIFEST at concurrency 1
# recorded in /tmp/fp8_gate_LABEL (what compare_answers.py reads; log $OUT/bench_LABEL.log, stopped
# after TIMEOUT s), the server stopped. Prints "START RC SECONDS": seconds to healthy, the bench's
# exit status, its seconds. The FP8 scripts' decide loop (fp8_gate.sh, fp8_oracle.sh).
serve_decide() {
  local label=$1 port=$2 manifest=$3 limit=$4 tries=$5 t0 t1 sp rc i
  shift 5
  t0=$(date +%s)
  clefserve serve "$@" --port "$port" > "$OUT/serve_$label.log" 2>&1 &
  sp=$!
  for i in $(seq 1 "$tries"); do curl -sf "http://127.0.0.1:$port/health" > "/tmp/health_$label.json" && break; kill -0 $sp 2>/dev/null || break; sleep 0.5; done
  t1=$(date +%s)
  rm -rf "/tmp/fp8_gate_$label"
  timeout "$limit" clefserve bench --url "http://127.0.0.1:$port" --manifest "$manifest" \
    --concurrency 1 --warmup 0 --traversals 1 --out "/tmp/fp8_gate_$label" > "$OUT/bench_$label.log" 2>&1
  rc=$?
  kill $sp; wait $sp 2>/dev/null
  echo "$(( t1 - t0 )) $rc $(( $(date +%s) - t1 ))"
}
