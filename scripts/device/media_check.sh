#!/usr/bin/env bash
# Images and videos on the GPU (issues 17/18): the GPU tests (GTEST_FILTER), the flash release,
# HF transformers parity of the vision tower and the backbone on one 1024x1024 image request
# (scripts/device/hf_parity_media.py), the media profile (1 and 4 images of 512x512 and
# 1024x1024, one 16-frame 640x480 video) and the text profile beside it; table last. Logs in $OUT.
# Usage (repo root on the device): STEPS="tests model parity media text" scripts/device/media_check.sh
# MEDIA_FORMAT=jpeg (or webp) sends the media profile's synthetic pictures in that format (default png).
set -uo pipefail
STEPS="${STEPS:-tests model parity media text}"
source scripts/device/setup.sh > /dev/null
link_binaries
M=/tmp/flash
L=$OUT
if has tests; then
  timeout "${TEST_TIMEOUT:-280}" test_gpu --gtest_brief=1 --gtest_filter="${GTEST_FILTER:--GdnTiming*}" > "$L/test_gpu.log" 2>&1
  summary+=("test_gpu: rc $? :: $(grep -E '^\[  (PASSED|FAILED)|tests from .* ran' "$L/test_gpu.log" | tr '\n' ' ')")
  while read -r l; do summary+=("  $l"); done < <(grep -E "FAILED|media on CUDA|GPU tower|packed vs alone|fp8|seed" "$L/test_gpu.log" | grep -v seed | head -24)
fi
if has model; then
  t0=$(date +%s)
  make_release flash "$M" "$L/misc.log"
  summary+=("model: flash ready ($(( $(date +%s) - t0 )) s)")
fi
# One request with a 1024x1024 image (a PNG python writes), for the parity dump and the HTTP check.
if [ ! -f /tmp/img_request.json ]; then
  # One request with a 1024x1024 image (the profile's synthetic picture, written by a tiny C++-free
  # route: the media profile's request is rebuilt here from a PNG python writes).
  python3 - > "$L/request.log" 2>&1 <<'PY'
import base64, json, struct, zlib
w = h = 1024
rows = []
for y in range(h):
    r = bytearray([0])
    for x in range(w):
        r += bytes(((x * 255 // (w - 1)) & 255, (y * 255 // (h - 1) + (x * y) % 13) & 255, ((x ^ y) + 7) & 255))
    rows.append(bytes(r))
def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + \
      chunk(b"IDAT", zlib.compress(b"".join(rows), 1)) + chunk(b"IEND", b"")
body = {"model": "clef-flash", "state": "A photo attached to the report. The customer says the payment failed.",
        "questions": {"q": {"type": "choice", "instructions": "What kind of document is this?",
                            "criteria": {"invoice": "A bill", "photo": "A photo", "chart": "A chart"}}},
        "images": ["data:image/png;base64," + base64.b64encode(png).decode()]}
json.dump(body, open("/tmp/img_request.json", "w"))
print("request written")
PY
fi
if has parity; then
  timeout 120 clefserve profile --model $M --device cuda --dump-hidden /tmp/media_hidden --request /tmp/img_request.json >> "$L/misc.log" 2>&1
  summary+=("dump rc $?")
  timeout 240 python3 scripts/device/hf_parity_media.py $M /tmp/media_hidden > "$L/parity.log" 2>&1
  summary+=("hf parity rc $?")
  while read -r l; do summary+=("  $l"); done < <(grep -E "PARITY|POSITIONS|Error|error" "$L/parity.log" | head -12)
fi
if has media; then
  timeout 300 clefserve profile --model $M --device cuda --runs 5 --warmup 2 --video-fps 2 \
    --media "${MEDIA:-1@512x512,4@512x512,1@1024x1024,4@1024x1024,v16@640x480}" \
    --media-format "${MEDIA_FORMAT:-png}" > "$L/media_profile.txt" 2>>"$L/misc.log"
  summary+=("media profile rc $?")
fi
if has text; then
  timeout 150 clefserve profile --model $M --device cuda --lengths "${LENGTHS:-361,961}" --runs 5 --warmup 2 \
    > "$L/profile.txt" 2>>"$L/misc.log"
  summary+=("text profile rc $?")
fi
if has workbench; then
  CLEF_BENCH_T=961 timeout 120 workbench_attention > "$L/workbench.txt" 2>&1
  summary+=("workbench_attention rc $?")
  timeout 60 workbench_vision >> "$L/workbench.txt" 2>&1
  summary+=("workbench_vision rc $?")
fi
if has fp8; then
  timeout 200 clefserve profile --model $M --device cuda --dtype fp8 --lengths "${FP8_LENGTHS:-961,5661}" --runs 5 --warmup 2 \
    > "$L/profile_fp8.txt" 2>>"$L/misc.log"
  summary+=("fp8 profile rc $?")
fi
if has http; then
  # One server, one image request and one text request over HTTP (the served path, C1).
  PORT=8751
  clefserve serve --model $M --device cuda --port $PORT > "$L/serve.log" 2>&1 &
  SPID=$!
  for i in $(seq 1 120); do curl -sf localhost:$PORT/health > /dev/null && break; sleep 1; done
  summary+=("server ready after ${i} s")
  for n in 1 2 3 4; do
    curl -s -o /tmp/resp.json -w "image request over HTTP: %{http_code} in %{time_total} s\n" \
      -H 'content-type: application/json' --data-binary @/tmp/img_request.json localhost:$PORT/v1/systemone >> "$L/http.txt"
  done
  head -c 400 /tmp/resp.json >> "$L/http.txt"; echo >> "$L/http.txt"
  kill $SPID; wait $SPID 2>/dev/null
  while read -r l; do summary+=("  $l"); done < <(grep -E "HTTP" "$L/http.txt")
fi
print_summary
[ -f "$L/media_profile.txt" ] && grep -E "^\| [0-9]|^clefserve profile|eager stages|^media:" "$L/media_profile.txt"
[ -f "$L/profile.txt" ] && grep -E "^\| [0-9]" "$L/profile.txt"
[ -f "$L/profile_fp8.txt" ] && grep -E "^\| [0-9]|kernels.gemm|dtype" "$L/profile_fp8.txt"
[ -f "$L/workbench.txt" ] && grep -iE "non-causal|tower|GB/s|TFLOP" "$L/workbench.txt" | head -30
