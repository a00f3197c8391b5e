#!/usr/bin/env bash
# Installs the Debian packages clefserve needs (idempotent, apt only) and builds build/clefserve.
# CLEF_CUDA=AUTO (default: CUDA backend when nvcc is present) | ON | OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache keys on paths relative to the checkout, so a fresh clone elsewhere reuses earlier compiles.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}" CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"

PKGS=(build-essential cmake pkg-config git ccache
      nlohmann-json3-dev libcpp-httplib-dev libboost-dev libpcre2-dev libutf8proc-dev libcli11-dev
      libopenblas-dev libssl-dev zlib1g-dev libbrotli-dev
      libjpeg62-turbo-dev libpng-dev libwebp-dev  # image decoding (src/media)
      libavformat-dev libavcodec-dev libavutil-dev libswscale-dev  # video files (src/media)
      libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev
      chromium chromium-driver python3-selenium  # the playground's browser test (tests/browser)
      haproxy yamllint python3-yaml)  # the last three: deploy/ and its tests (docs/deploy.md)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

CLEF_CUDA="${CLEF_CUDA:-AUTO}"
JOBS="${JOBS:-$(nproc)}"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCLEF_CUDA="$CLEF_CUDA" ${CLEF_CMAKE_ARGS:-}
cmake --build build -j "$JOBS"
echo "setup: built $(pwd)/build/clefserve" >&2
