#!/usr/bin/env bash
# Installs what kiln needs from Debian (a no-op when present), then builds.
# Usage: tools/setup.sh [BUILD_DIR] [extra meson setup options...]
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(build-essential meson ninja-build pkg-config clang
      libzmq3-dev libprotobuf-c-dev protobuf-c-compiler liblmdb-dev
      libxgboost-dev libcmocka-dev libjson-c-dev libmicrohttpd-dev
      libopenblas-dev libdnnl-dev valgrind
      bubblewrap libseccomp-dev
      libxml2-utils chromium clang-format
      curl python3
      systemd slurmctld slurmd slurm-client munge python3-yaml yamllint)
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

# NVRTC (the CUDA tests compile with it; no GPU needed) comes with the CUDA
# toolkit, which is installed with the machine, not from Debian. kiln
# dlopens libnvrtc by name and then from /usr/local/cuda/lib64, but NVRTC
# itself loads libnvrtc-builtins by name: without the toolkit's library
# folder in the loader's cache every compilation fails. Add it when it is
# missing; without a toolkit, the NVRTC test cases say SKIP.
cuda=${CUDA_HOME:-/usr/local/cuda}
ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
if ! "$ldconfig" -p | grep 'libnvrtc-builtins\.so' >/dev/null; then
    lib=""
    for d in "$cuda/lib64" "$cuda/lib"; do
        if ls "$d"/libnvrtc-builtins.so* >/dev/null 2>&1; then
            lib=$(readlink -f "$d")
            break
        fi
    done
    if [ -n "$lib" ]; then
        echo "setup: adding $lib (NVRTC) to the loader's path" >&2
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        echo "$lib" | $sudo tee /etc/ld.so.conf.d/kiln-cuda.conf >/dev/null
        $sudo "$ldconfig"
    else
        echo "setup: no CUDA toolkit in $cuda: the NVRTC tests will skip" >&2
    fi
fi

build=${1:-build}
shift || true
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$@" >&2
fi
ninja -C "$build" >&2
