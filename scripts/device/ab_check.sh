#!/usr/bin/env bash
# One device call comparing carried clefserve builds (perf-log v18a: token buckets, SiLU form):
# the GPU tests (GTEST_FILTER), the kernel workbenches of WB before / after (`wb`: carried
# workbench_<family>_before and workbench_<family> binaries), `clefserve profile` of every binary in BINS (names under
# .devcarry's bin/, alternated PROFILE_ROUNDS times in one call, so each process's GEMM choices
# and clocks spread over all of them; PROFILE_EXTRA adds arguments, e.g. "--batch 8"), and `serve`: the first of BINS served cold (no tuning cache)
# with its start-up read from /health, then `clefserve bench` at each concurrency of CS over
# public231-shape and at each of SHORT_CS over public231-short, with the /metrics batch counters.
# `batch`: `profile --batch BATCH` (one packed forward) at BATCH_LENGTHS for every binary (or one per
# BATCH_SETS entry "N:LENGTHS"). Logs in $OUT.
# TEST_VARS=VAR=VAL[,VAR=VAL] sets those for the tests only. BENCH_ARGS: more `clefserve bench`
# arguments, e.g. "--gemm-floor-tokens-per-s 49400" (the ceiling printed by the bench itself).
# Usage (repo root on the device):
#   [STEPS="tests wb profile serve"] [BINS="clefserve clefserve_b"] scripts/device/ab_check.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
STEPS=${STEPS:-tests profile}
BINS=${BINS:-clefserve}
start_check
if has serve && [ -z "$MK" ]; then
  ( make_release flash "$M" "$L/misc.log" ) &
  MK=$!
fi
if has tests; then
  t0=$(date +%s)
  F=${GTEST_FILTER:-*GdnConvPrep*:*Swiglu*:*Fp8Producers*:*Golden*:*CudaEngine*:*Packed*:*CudaPrepare*}
  tvars=(); [ -n "${TEST_VARS:-}" ] && IFS=, read -ra tvars <<< "$TEST_VARS"  # VAR=VAL[,VAR=VAL]
  timeout "${TEST_TIMEOUT:-300}" env "${tvars[@]}" test_gpu --gtest_brief=1 --gtest_filter="$F" > "$L/test_gpu.log" 2>&1
  summary+=("test_gpu ${TEST_VARS:-} $F: rc $? in $(( $(date +%s) - t0 )) s :: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)|tests from .* ran' "$L/test_gpu.log" | tr '\n' ' ')")
  while read -r l; do summary+=("  $l"); done < <(grep -E "FAILED|bf16.*noise|max \|dp\|" "$L/test_gpu.log" | head -16)
fi
if has wb; then  # kernel workbenches: each of WB as workbench_<family>_before (if carried) and after
  for w in ${WB:-attn_prep elementwise gdn_prep norm}; do
    for v in "${w}_before" "$w"; do
      [ -x "/tmp/c/bin/workbench_$v" ] || continue
      for envs in "" ${WB_VARS:-}; do  # WB_VARS: more runs, each with VAR=VAL[,VAR=VAL] set
        vars=(); [ -n "$envs" ] && IFS=, read -ra vars <<< "$envs"
        echo "## workbench_$v ${envs}" >> "$L/workbench.txt"
        timeout 120 env "${vars[@]}" "/tmp/c/bin/workbench_$v" >> "$L/workbench.txt" 2>&1
        summary+=("workbench_$v ${envs} rc $?")
      done
    done
  done
fi
wait_model
if has profile; then
  for r in $(seq 1 "${PROFILE_ROUNDS:-1}"); do
    for entry in $BINS; do  # NAME or NAME:VAR=VALUE[,VAR=VALUE] (the binary run with those set)
      b=${entry%%:*}
      vars=(); [[ $entry == *:* ]] && IFS=, read -ra vars <<< "${entry#*:}"
      echo "## round $r binary $entry" >> "$L/profile.txt"
      timeout "${PROFILE_TIMEOUT:-150}" env "${vars[@]}" "/tmp/c/bin/$b" profile --model $M --device cuda \
        --lengths "${PROFILE_LENGTHS:-361,961,2761,5661}" --runs 7 --warmup 2 ${PROFILE_EXTRA:-} >> "$L/profile.txt" 2>> "$L/misc.log"
      summary+=("profile round $r $entry rc $?")
    done
  done
fi
if has batch; then  # one packed forward of BATCH requests of each of BATCH_LENGTHS, each of BATCH_BINS
  # BATCH_SETS="7:1000 28:330": one packed forward per set (BATCH:BATCH_LENGTHS) instead
  rm -f /tmp/batch_*.json  # no earlier call's floor
  nb=0
  for set in ${BATCH_SETS:-${BATCH:-8}:${BATCH_LENGTHS:-400,1000}}; do
    for entry in ${BATCH_BINS:-$BINS}; do  # NAME or NAME:VAR=VALUE[,VAR=VALUE], as in profile
      nb=$((nb + 1))
      b=${entry%%:*}
      vars=(); [[ $entry == *:* ]] && IFS=, read -ra vars <<< "${entry#*:}"
      echo "## batch ${set%%:*} x ${set#*:} binary $entry" >> "$L/profile.txt"
      timeout "${PROFILE_TIMEOUT:-150}" env "${vars[@]}" "/tmp/c/bin/$b" profile --model $M --device cuda \
        --lengths "${set#*:}" --runs 7 --warmup 2 --batch "${set%%:*}" \
        --json "/tmp/batch_$nb.json" >> "$L/profile.txt" 2>> "$L/misc.log"
      summary+=("batch profile ${set%%:*} x ${set#*:} $entry rc $?")
    done
  done
fi
# BENCH_FLOOR=batch (with the batch step): the bench's --gemm-floor-tokens-per-s from this call's
# own packed-forward floor (the first set's first binary, first length in its profile JSON: batch x tokens /
# batch_gemm_floor_ms), so the ceiling it prints is this GPU's.
if has batch && [ "${BENCH_FLOOR:-}" = batch ]; then
  fl=$(python3 -c "
import json; r = json.load(open('/tmp/batch_1.json'))['rows'][0]
print('%.0f' % (r['batch'] * r['tokens'] / r['batch_gemm_floor_ms'] * 1000))" 2>> "$L/misc.log")
  summary+=("floor from the batch profile: ${fl:-none} tokens/s")
  [ -n "$fl" ] && BENCH_ARGS="${BENCH_ARGS:-} --gemm-floor-tokens-per-s $fl"
fi
if has serve; then
  run_bench() {  # MANIFEST C LABEL
    local rc
    timeout 240 clefserve bench --url http://127.0.0.1:$PORT --manifest "$1" --concurrency "$2" \
      --warmup "$2" --traversals "${TRAV:-2}" --out "/tmp/bench_$3" ${BENCH_ARGS:-} > "/tmp/bench_$3.log" 2>&1
    rc=$?
    { echo "## bench $3"; cat "/tmp/bench_$3.log"; } >> "$L/bench.log"
    # The rate, then the bench's own report.md lines on the server's batches over the measured
    # phase (warm-up left out) and on the ceiling where BENCH_ARGS gave a floor.
    local lines
    mapfile -t lines < <(python3 -c "
import json; r = json.load(open('/tmp/bench_$3/report.json'))
l = r.get('successful_latency_ms', {}); t = r.get('throughput', {})
print('req/s %.2f, p50 %.1f ms, p95 %.1f ms, failures %s' % (t.get('requests_per_s') or 0, l.get('p50') or 0, l.get('p95') or 0, json.dumps(r.get('failures'))))" 2>&1;
      grep -E "^(Server batches|GEMM-bound ceiling)" "/tmp/bench_$3/report.md" | sed 's/^/  /')
    summary+=("$3: bench rc $rc :: ${lines[0]:-no report}" "${lines[@]:1}")
  }
  # SERVE_BINS (default: the first of BINS): served one after another, each cold but the first
  # GEMM tuning cache (written by the first, read by the rest: the same GEMM choices in each);
  # entries NAME or NAME:VAR=VALUE[,VAR=VALUE] as in BINS.
  n=0
  for entry in ${SERVE_BINS:-${BINS%% *}}; do
    n=$((n + 1))
    b=${entry%%:*}
    vars=(); [[ $entry == *:* ]] && IFS=, read -ra vars <<< "${entry#*:}"
    PORT=$((8740 + n))
    t0=$(date +%s)
    # Servers after the first read a private copy of the first one's cache: one whose GEMM policy
    # differs would otherwise overwrite it for the rest (perf-log v27b).
    tc=/tmp/tc_ab
    if [ $n -gt 1 ]; then tc=/tmp/tc_ab_$n; rm -rf $tc; cp -r /tmp/tc_ab $tc 2>/dev/null || mkdir -p $tc; fi
    env "${vars[@]}" "/tmp/c/bin/$b" serve --model $M --device cuda --port $PORT --tuning-cache $tc > "/tmp/serve$n.log" 2>&1 &
    SP=$!
    for i in $(seq 1 900); do curl -sf http://127.0.0.1:$PORT/health > /tmp/health.json && break; kill -0 $SP 2>/dev/null || break; sleep 0.5; done
    summary+=("serve $n $entry: healthy after $(( $(date +%s) - t0 )) s :: $(python3 -c "
import json; h = json.load(open('/tmp/health.json')); print(json.dumps(h.get('startup')))" 2>&1)")
    for c in ${CS:-16}; do run_bench manifests/public231-shape.jsonl "$c" "s${n}_shape_c$c"; done
    for c in ${SHORT_CS:-}; do run_bench manifests/public231-short.jsonl "$c" "s${n}_short_c$c"; done
    kill $SP; wait $SP 2>/dev/null
    { echo "## serve $n $entry"; cat "/tmp/serve$n.log"; } >> "$L/serve.log"
  done
fi
print_summary
[ -f "$L/profile.txt" ] && grep -E "^## |^\| [0-9]" "$L/profile.txt" | head -60
exit 0
