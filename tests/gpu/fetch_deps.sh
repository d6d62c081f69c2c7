#!/bin/sh
# tests/gpu/fetch_deps.sh - run where apt works (a development machine):
# downloads the Debian packages kiln needs to build into .gpudeps/ at the
# repository root (ignored by git), for a GPU machine that lacks them and
# cannot reach a registry. Name .gpudeps in the device run's carry list;
# tests/gpu/run.sh unpacks them into a private prefix (never into /) when
# the system does not have the libraries.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
mkdir -p .gpudeps
if ! grep -qx '/.gpudeps/' .git/info/exclude 2>/dev/null; then
    echo '/.gpudeps/' >>.git/info/exclude
fi
cd .gpudeps
# Build: headers, .pc files, protoc-c (OpenBLAS: the benchmarks that
# meson builds with the tree). Run: the shared libraries and what
# they need beyond glibc / libstdc++ / libgomp.
apt-get download \
    libzmq3-dev libzmq5 libsodium23 libpgm-5.3-0 libnorm1 libbsd0 libmd0 \
    libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 \
    libcom-err2 \
    libprotobuf-c-dev libprotobuf-c1 protobuf-c-compiler libprotoc32 \
    libprotobuf32 \
    liblmdb-dev liblmdb0 libjson-c-dev libjson-c5 \
    libxgboost-dev libxgboost0 libdmlc0 \
    libcmocka-dev libcmocka0 \
    libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libquadmath0 \
    pkgconf pkgconf-bin libpkgconf3
du -sh .
