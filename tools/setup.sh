#!/usr/bin/env bash
# Installs what kiln needs from Debian (a no-op when present), then builds.
# Usage: tools/setup.sh [BUILD_DIR] [extra meson setup options...]
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(build-essential meson ninja-build pkg-config clang
      libzmq3-dev libprotobuf-c-dev protobuf-c-compiler liblmdb-dev
      libxgboost-dev libcmocka-dev libjson-c-dev libmicrohttpd-dev
      libopenblas-dev libdnnl-dev valgrind
      libxml2-utils chromium
      curl python3)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
        missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
fi

build=${1:-build}
shift || true
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$@" >&2
fi
ninja -C "$build" >&2
