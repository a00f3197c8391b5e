#!/usr/bin/env bash
# Before/after check of an engine change that must not change behaviour, in one device call: the
# GPU tests of both builds (the golden parity lines must be identical), the flash-preset release,
# the profile of both binaries alternated (B A B A) at the default lengths, hidden-state dumps of
# both in bf16 and fp32 on the same 777 random ids (bitwise compared), and decide on two requests
# (answers compared). Binaries: bin/ (after) and before/ (before) inside .devcarry/pkg.tar.xz.
# Usage (repo root on the device): STEPS="tests model profile hidden decide generic workbench" scripts/device/reshape_check.sh
set -uo pipefail
STEPS="${STEPS:-tests model profile hidden decide workbench}"
source scripts/device/setup.sh
M=/tmp/flash
L=$OUT
B=/tmp/c/before
has() { [[ " $STEPS " == *" $1 "* ]]; }
summary=()

if has tests; then
  timeout 300 test_gpu --gtest_brief=1 --gtest_filter="${GTEST_FILTER:--GdnTiming*:*Throughput*}" > "$L/test_gpu.log" 2>&1
  summary+=("test_gpu after: rc $? :: $(grep -E '^\[  (PASSED|FAILED)' "$L/test_gpu.log" | tr '\n' ' ')")
  grep -E "FAILED" "$L/test_gpu.log" | head -12
  timeout 300 $B/test_gpu --gtest_brief=1 --gtest_filter="*CudaEngineGolden*:*CudaJointHead*" > /tmp/test_gpu_before.log 2>&1
  summary+=("test_gpu before (golden + head): rc $?")
    # Lines of the fixed-input golden checks (the random-input ones differ by seed, not by code).
  grep -E "^tiny|head vs fixture" "$L/test_gpu.log" | sort > /tmp/par_after.txt
  grep -E "^tiny|head vs fixture" /tmp/test_gpu_before.log | sort > /tmp/par_before.txt
  { echo "== golden parity lines before"; cat /tmp/par_before.txt; echo "== after"; cat /tmp/par_after.txt; } >> "$L/test_gpu.log"
  summary+=("golden parity lines: $(wc -l < /tmp/par_before.txt) before, $(wc -l < /tmp/par_after.txt) after, $(diff /tmp/par_before.txt /tmp/par_after.txt > /dev/null && echo IDENTICAL || echo DIFFER)")
fi

if has model; then
  t0=$(date +%s)
  clefserve make-model --preset flash --force --out $M --tokenizer tests/golden/tokenizers/qwen3 > "$L/misc.log" 2>&1
  summary+=("model: make-model --preset flash rc $? ($(( $(date +%s) - t0 )) s)")
fi

if has profile; then
  for r in 1 2; do
    for who in before after; do
      bin=clefserve; [ $who = before ] && bin=$B/clefserve
      timeout 200 $bin profile --model $M --device cuda --runs "${RUNS:-10}" > "/tmp/prof_${who}_$r.txt" 2>>"$L/misc.log"
      echo "rc $? $who run $r" >> "$L/misc.log"
    done
  done
  { for f in /tmp/prof_*.txt; do echo "== $f"; cat "$f"; done; } > "$L/profile.txt"
fi

if has hidden; then
  python3 -c "import random; random.seed(1); print(' '.join(str(random.randrange(151643)) for _ in range(777)))" > /tmp/ids.txt
  for dt in bfloat16 float32; do
    $B/clefserve profile --model $M --dtype $dt --dump-hidden /tmp/h_before_$dt.f32 --ids /tmp/ids.txt >> "$L/misc.log" 2>&1
    clefserve profile --model $M --dtype $dt --dump-hidden /tmp/h_after_$dt.f32 --ids /tmp/ids.txt >> "$L/misc.log" 2>&1
    summary+=("hidden $dt (777 ids, flash): $(cmp -s /tmp/h_before_$dt.f32 /tmp/h_after_$dt.f32 && echo BITWISE IDENTICAL || echo DIFFER) ($(stat -c %s /tmp/h_after_$dt.f32) bytes)")
  done
fi

if has decide; then
  head -2 tests/golden/models/tiny-r2.expected.jsonl | python3 -c "
import sys, json
for i, l in enumerate(sys.stdin):
    open(f'/tmp/req{i}.json', 'w').write(json.dumps(json.loads(l)['request']))"
  for i in 0 1; do
    $B/clefserve decide --model $M --device cuda --raw --truncation allow < /tmp/req$i.json > /tmp/before$i.json 2>>"$L/misc.log"
    clefserve decide --model $M --device cuda --raw --truncation allow < /tmp/req$i.json > /tmp/after$i.json 2>>"$L/misc.log"
    summary+=("decide request $i (flash, bf16): $(python3 -c "
import json; a = json.load(open('/tmp/before$i.json'))['raw']; b = json.load(open('/tmp/after$i.json'))['raw']; print('IDENTICAL raw probabilities' if a == b else 'DIFFER')")")
  done
fi

if has generic; then
  timeout 200 clefserve profile --model $M --device cuda --kernels generic --lengths 961 --runs 5 > /tmp/prof_generic.txt 2>>"$L/misc.log"
  summary+=("profile --kernels generic rc $?: $(grep -E '^\| 961' /tmp/prof_generic.txt)")
  grep -E "kernels\.(elementwise|linear_attention|mode)" /tmp/prof_generic.txt >> "$L/misc.log"
fi

if has workbench; then
  OUT=/tmp/wb bash scripts/device/workbench.sh > "$L/workbench.log" 2>&1
  while read -r l; do summary+=("$l"); done < <(grep "^workbench_" "$L/workbench.log")
fi

print_summary
for f in /tmp/prof_*.txt; do [ -f "$f" ] && { echo "== $f"; grep -vE "^\s*kernels\.|^cuda:" "$f" | head -30; }; done
