#!/usr/bin/env bash
# tests/gpu/run.sh - kiln's GPU check, in one call, on a machine with an
# NVIDIA GPU (exit 77 with a message when there is none):
#   1. builds kiln from this tree (build-gpu/), with the Debian packages of
#      .gpudeps/ (tests/gpu/fetch_deps.sh) unpacked into a private prefix
#      when the machine lacks the libraries;
#   2. starts a local fleet with one CUDA kiln-agent and checks its faults:
#      an out-of-bounds kernel, an infinite loop, a wrong result, a result
#      wrong only after its first launch (caught by the check after
#      timing), each recorded right with the agent alive
#      (tests/gpu/gpu_check.c);
#   3. tunes matmul M=1024 N=1024 K=1024 for the GPU's arch with
#      `kiln tune --target cuda/sm_XY --strategy evolutionary
#      --max-trials-per-task TRIALS` on the local fleet (one kiln-agent,
#      --device cuda:all), records in build-gpu/gpu-db; the best record's
#      CUDA source comes from `kiln db best --source`;
#   4. times cuBLAS sgemm (TF32 off) in the same run, interleaved with the
#      best kernel, whose output it checks against cuBLAS's (tools/bench/
#      bench_cublas.c), and prints best GFLOP/s, cuBLAS GFLOP/s, the ratio
#      and trials/s.
# Environment: TRIALS (200: under 5 minutes on an H200; 1000 for the goal
# check), BUDGET_S (seconds for the tuning; default 250 minus the build
# for TRIALS <= 200, else 2 s per trial; at the budget kiln tune is
# stopped with SIGINT and keeps what it measured), JOBS (cores),
# KILN_GPU_DEVICE (cuda:0, the fault checks' agent), KILN_GPU_FORCE_DEPS=1
# (use .gpudeps even when the system has the libraries),
# KILN_GPU_BUILD_ONLY=1 (stop after the build): both to try the build on a
# development machine. Logs and the summary go to $OUT (when set) or
# build-gpu/gpu-logs.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
t_start=$(date +%s)
trials=${TRIALS:-${SAMPLES:-200}}
device=${KILN_GPU_DEVICE:-cuda:0}
jobs=${JOBS:-$(nproc)}
build=$root/build-gpu
logs=${OUT:-$build/gpu-logs}
unset KILN_FAKE_GPU_WORKER
say() { echo "run.sh: $*"; }
elapsed() { echo $(($(date +%s) - t_start)); }

# ---- 1. is there a GPU? -------------------------------------------------
# KILN_GPU_BUILD_ONLY=1: only steps 2 and 3 (to try them without a GPU).
build_only=${KILN_GPU_BUILD_ONLY:-0}
if [ "$build_only" != 1 ] && ! { command -v nvidia-smi >/dev/null 2>&1 &&
    nvidia-smi -L 2>/dev/null | grep -q '^GPU'; } &&
    ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
    say "SKIP: no NVIDIA GPU here (nvidia-smi lists none, no /dev/nvidia0)"
    exit 77
fi
mkdir -p "$logs" "$build"
nvidia-smi --query-gpu=name,compute_cap,driver_version,clocks.max.sm \
    --format=csv,noheader 2>/dev/null | tee "$logs/gpu.txt"
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
    head -1 | tr -d ' .')
arch=sm_${cap:-90}

# ---- 2. build dependencies ------------------------------------------------
have_deps() {
    command -v pkg-config >/dev/null 2>&1 && command -v protoc-c >/dev/null &&
        pkg-config --exists libzmq libprotobuf-c json-c cmocka lmdb openblas \
            2>/dev/null &&
        ldconfig -p | grep -q libxgboost
}
if [ "${KILN_GPU_FORCE_DEPS:-0}" = 1 ] || ! have_deps; then
    if ! ls "$root"/.gpudeps/*.deb >/dev/null 2>&1; then
        say "FAIL: build dependencies missing (libzmq, protobuf-c, json-c," \
            "lmdb, xgboost, cmocka, pkg-config) and no .gpudeps/: run" \
            "tests/gpu/fetch_deps.sh where apt works and carry .gpudeps"
        exit 1
    fi
    pfx=$build/deps
    lib=$pfx/usr/lib/x86_64-linux-gnu
    rm -rf "$pfx" && mkdir -p "$pfx"
    for d in "$root"/.gpudeps/*.deb; do dpkg-deb -x "$d" "$pfx" || exit 1; done
    # A library soname the system has stays the system's at run time: drop
    # our soname link (the versioned file stays, for linking).
    sonames=$(ldconfig -p | awk 'NR > 1 { print $1 }')
    for f in "$lib"/*.so.*; do
        b=$(basename "$f")
        if [ "${KILN_GPU_FORCE_DEPS:-0}" != 1 ] &&
            echo "$sonames" | grep -qx "$b"; then rm -f "$f"; fi
    done
    for l in "$lib"/*.so; do # dev links that named a dropped soname
        [ -L "$l" ] && [ ! -e "$l" ] || continue
        real=$(ls "$l".* 2>/dev/null | head -1)
        [ -n "$real" ] && ln -sf "$(basename "$real")" "$l"
    done
    # .pc files: no private requirements (shared linking needs none).
    for pc in "$lib"/pkgconfig/*.pc "$lib"/openblas-pthread/pkgconfig/*.pc; do
        sed -i -e '/^Requires.private/d' -e '/^Libs.private/d' "$pc"
    done
    [ -x "$pfx/usr/bin/pkgconf" ] && ln -sf pkgconf "$pfx/usr/bin/pkg-config"
    export PATH=$pfx/usr/bin:$PATH
    export PKG_CONFIG_PATH=$lib/pkgconfig:$lib/openblas-pthread/pkgconfig:$pfx/usr/share/pkgconfig
    export PKG_CONFIG_SYSROOT_DIR=$pfx
    export CPATH=$pfx/usr/include${CPATH:+:$CPATH}
    export LIBRARY_PATH=$lib:$lib/openblas-pthread${LIBRARY_PATH:+:$LIBRARY_PATH}
    export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    say "using the packages of .gpudeps (prefix $pfx)"
fi
# meson and ninja may come with Python (pip) rather than the system.
for py in python3 /opt/torch/.venv/bin/python3; do
    d=$(dirname "$(readlink -f "$(command -v $py 2>/dev/null || echo /x/y)")")
    [ -x "$d/meson" ] && export PATH=$PATH:$d
done

# ---- 3. build -------------------------------------------------------------
say "building kiln in $build ($(elapsed) s)"
# Warnings stay warnings: another machine's compiler may know new ones.
opts="-Dbuildtype=debugoptimized -Dwerror=false"
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" $opts >"$logs/meson.log" 2>&1
else
    meson configure "$build" $opts >"$logs/meson.log" 2>&1
fi || {
    tail -30 "$logs/meson.log"
    say "FAIL: meson setup"
    exit 1
}
ninja -C "$build" -j"$jobs" tools/kiln agent/kiln-agent tests/gpu/gpu_check \
    tools/bench_cublas >"$logs/ninja.log" 2>&1 || {
    tail -30 "$logs/ninja.log"
    say "FAIL: build"
    exit 1
}
export KILN_AGENT=$build/agent/kiln-agent
if [ "$build_only" = 1 ]; then
    say "built ($(elapsed) s); KILN_GPU_BUILD_ONLY=1: stopping here"
    exit 0
fi

# ---- 4. faults, then kiln tune ------------------------------------------
op="matmul M=1024 N=1024 K=1024"
space=$build/gpu-space
db=$build/gpu-db
rm -rf "$space" "$db"
# gpu_check's fault checks need only the manifest (arguments, key).
"$build/tools/kiln" space --op "$op" --target "cuda/$arch" --samples 1 \
    --seed 1 --emit "$space" 2>"$logs/space.log" || {
    cat "$logs/space.log"
    say "FAIL: kiln space"
    exit 1
}
say "fault checks on $device ($(elapsed) s)"
timeout 180 "$build/tests/gpu/gpu_check" --dir "$space" --faults-only \
    --agent "$KILN_AGENT" --device "$device" \
    >"$logs/gpu_check.txt" 2>"$logs/agent.log"
rc=$?
cat "$logs/gpu_check.txt"
if [ $rc -ne 0 ]; then
    tail -20 "$logs/agent.log"
    [ $rc -eq 77 ] && say "SKIP: see above" && exit 77
    say "FAIL: gpu_check exited $rc"
    exit 1
fi
if [ "$trials" -le 200 ]; then budget=$((250 - $(elapsed))); else budget=$((2 * trials)); fi
budget=${BUDGET_S:-$budget}
[ "$budget" -lt 60 ] && budget=60
say "kiln tune: $trials trials of '$op' on cuda/$arch, budget $budget s ($(elapsed) s)"
t0=$(date +%s.%N)
timeout -k 60 -s INT "$budget" "$build/tools/kiln" tune --op "$op" \
    --target "cuda/$arch" --strategy evolutionary \
    --max-trials-per-task "$trials" --db "$db" --seed 1 \
    --min-repeat-ms 20 --atol 1e-3 --timeout-ms 10000 \
    >"$logs/tune.txt" 2>"$logs/tune.log"
rc=$?
t1=$(date +%s.%N)
sed -n '/^trace$/q;p' "$logs/tune.txt" # the trace text is long
grep '^source' "$logs/tune.txt"
grep -E "no CUDA device|reference kernel failed" "$logs/tune.log"
tail -3 "$logs/tune.log"
if [ $rc -eq 69 ]; then
    say "SKIP: kiln tune found no CUDA device (see above)"
    exit 77
fi
if [ $rc -eq 124 ]; then
    say "budget of $budget s reached: kiln tune stopped, keeping what it measured"
fi
if ! grep -q "^best .* us" "$logs/tune.txt"; then
    say "FAIL: kiln tune exited $rc without a verified kernel"
    exit 1
fi
# trials: "trials     N (V valid, R restored from the store)"
read -r n_trials n_valid <<<"$(awk '$1 == "trials" { gsub(/\(/, "", $3); print $2, $3; exit }' "$logs/tune.txt")"
tps=$(awk -v n="${n_trials:-0}" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", n / (b - a) }')
"$build/tools/kiln" db best --db "$db" --name matmul_1024_1024_1024 \
    --target "cuda/$arch" --source >"$logs/best.txt" 2>"$logs/best.log" || {
    cat "$logs/best.log"
    say "FAIL: kiln db best"
    exit 1
}
sed -n '/^source$/,$p' "$logs/best.txt" | tail -n +2 >"$logs/best.cu"
# "latency    X us median, Y GFLOP/s"
best_us=$(awk '$1 == "latency" { print $2; exit }' "$logs/best.txt")
best=$(awk '$1 == "latency" { print $(NF - 1); exit }' "$logs/best.txt")
# The launch from the kernel's first line: "grid (x, y, z), block (x, y,
# z), N bytes shared"; dynamic shared memory only above the static 48 KiB.
launch=$(head -1 "$logs/best.cu" | tr -d '(),' | awk '{
    for (i = 1; i <= NF; i++) {
        if ($i == "grid") g = $(i + 1) " " $(i + 2) " " $(i + 3)
        if ($i == "block") b = $(i + 1) " " $(i + 2) " " $(i + 3)
        if ($i == "bytes") s = $(i - 1)
    }
    print g, b, (s > 49152 ? s : 0) }')
sm_clock=$(nvidia-smi --query-gpu=clocks.sm --format=csv,noheader 2>/dev/null |
    head -1)
val() { awk -v k="$1" '$1 == k { print $2 }' "$2" | tail -1; }
# The best kernel and cuBLAS timed by one program, interleaved.
say "cuBLAS baseline, interleaved with the best kernel ($(elapsed) s)"
# shellcheck disable=SC2086
"$build/tools/bench_cublas" 1024 1024 1024 20 "$logs/best.cu" kl_main $launch \
    >"$logs/cublas.txt" 2>&1 ||
    "$build/tools/bench_cublas" 1024 1024 1024 20 >"$logs/cublas.txt" 2>&1
cat "$logs/cublas.txt"

# ---- 5. summary -------------------------------------------------------------
cub=$(val cublas_gflops "$logs/cublas.txt")
ratio=$(awk -v a="${best:-0}" -v b="${cub:-0}" \
    'BEGIN { if (b > 0) printf "%.3f", a / b; else print "n/a" }')
{
    echo "=== kiln GPU check: $op, kiln tune $n_trials of $trials trials, $device ($arch)"
    echo "best kiln kernel   : ${best:-none} GFLOP/s (${best_us:-?} us, launch $launch)"
    echo "cuBLAS sgemm (FP32): ${cub:-n/a} GFLOP/s"
    echo "ratio kiln / cuBLAS: $ratio (tuning run vs cuBLAS run)"
    echo "interleaved        : kiln $(val kiln_gflops "$logs/cublas.txt") GFLOP/s, cuBLAS $(val cublas_gflops "$logs/cublas.txt"), ratio $(val ratio "$logs/cublas.txt"), $(grep kiln_check "$logs/cublas.txt")"
    echo "trials/s           : ${tps:-n/a} (valid ${n_valid:-?}, failed $(( ${n_trials:-0} - ${n_valid:-0} )))"
    echo "SM clock after run : ${sm_clock:-unknown}"
    echo "wall time          : $(elapsed) s"
} | tee "$logs/summary.txt"
[ -n "$best" ] && [ -n "$cub" ] || exit 1
exit 0
