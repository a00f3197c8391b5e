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
