#!/usr/bin/env bash
# One device call: where does a packed forward's request differ from the same request alone?
# `clefserve profile --invariance` on a random release of PRESET (flash by default) for a few packs
# (PACKS, ';'-separated --lengths lists): each request's logits alone vs packed (served path), then
# the backbone's hidden rows after each of LAYERS decoder layers. EXTRA (optional) repeats the first
# pack under another environment (e.g. "CLEF_ATTN_PICK=256=wg64"). Output: $OUT/result.txt.
# Usage (repo root on the device): [PRESET=flash] [PACKS=...] [LAYERS=...] scripts/device/invariance_layers.sh
set -uo pipefail
source scripts/device/setup.sh > /dev/null
PRESET=${PRESET:-flash}
M=/tmp/$PRESET
R=$OUT/result.txt
PACKS=${PACKS:-"300,1000,777,2000,450,1500;1500,450,2000,777,1000,300"}
LAYERS=${LAYERS:-"1,2,3,4,5,8,16,-1"}
nvidia-smi -L | tee -a "$R"
t0=$(date +%s)
make_release "$PRESET" "$M" "$OUT/make_model.log"
echo "model $(( $(date +%s) - t0 ))s" | tee -a "$R"
n=0
IFS=';' read -ra packs <<< "$PACKS"
run() {  # [VAR=value ...] lengths
  n=$((n + 1))
  echo "## $* ($(( $(date +%s) - t0 ))s)" | tee -a "$R"
  env "${@:1:$#-1}" clefserve profile --model "$M" --device cuda --lengths "${@: -1}" \
    --invariance --layers "$LAYERS" > "$OUT/inv$n.log" 2>&1
  echo "rc $?" | tee -a "$R"
  grep -E '^\||^invariance|gemm .*(batch invariant|keeps)' "$OUT/inv$n.log" | tee -a "$R"
}
for p in "${packs[@]}"; do run "$p"; done
[ -n "${EXTRA:-}" ] && run $EXTRA "${packs[0]}"
echo "elapsed $(( $(date +%s) - t0 ))s" | tee -a "$R"
exit 0
