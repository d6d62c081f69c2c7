#!/usr/bin/env bash
# kiln tune for a CUDA target without a GPU:
#  1. `--target cuda/sm_90` on a machine without a CUDA driver (forced with
#     KILN_LIBCUDA pointing nowhere, so that it holds on a GPU machine too)
#     exits 69 as soon as its local agent exits 69 (not after a wait),
#     naming the missing CUDA device, with nothing measured;
#  2. `--target cuda` alone is a usage error asking for cuda/sm_NN;
#  3. a dry run on the agent's fake GPU (KILN_FAKE_GPU_WORKER=1: NVRTC
#     builds every candidate for sm_90, results are simulated, so the fake
#     GPU's target is sim/cuda/sm_90): a job for the real cuda/sm_90 finds
#     no agent; one for sim/cuda/sm_90 records 24 CUDA candidates there,
#     the best source is a .cu kernel, a resumed run restores them, `kiln
#     db best --source` regenerates CUDA C, the same kernel apart from its
#     first comment line (the workload's name), and cuda/sm_90 itself has
#     no valid record.
# SKIP (77) when the agent cannot load NVRTC.
. "$(dirname "$0")/lib.sh"
OP="matmul M=128 N=128 K=64"
TEVAL=(--repeat 3 --min-repeat-ms 0 --timeout-ms 5000 --no-flush)

# timeout 60 is a hang bound only (exit 124); how fast it fails is not
# asserted, what it did is.
start=$(date +%s)
KILN_LIBCUDA=/nonexistent/libcuda.so.1 timeout 60 "$KILN" tune --op "$OP" \
    --target cuda/sm_90 --max-trials-per-task 8 --db "$T/nodev" \
    >"$T/nodev.txt" 2>"$T/nodev.log"
rc=$?
took=$(( $(date +%s) - start ))
[ $rc -ne 124 ] || fail "no CUDA driver: kiln tune still ran after 60 s"
[ $rc -eq 69 ] || fail "no CUDA driver: kiln tune exited $rc, expected 69"
grep -q "no CUDA device" "$T/nodev.log" || fail "no 'no CUDA device' message"
grep -q "no CUDA driver" "$T/nodev.log" || fail "the agent's reason is missing"
grep -q "kiln-agent (--device cuda:all) exited 69" "$T/nodev.log" ||
    fail "not stopped by its agent's exit"
grep -q "^trials *0 (0 valid" "$T/nodev.txt" || fail "no CUDA driver: trials ran"
echo "no device: exit 69 in $took s"

"$KILN" tune --op "$OP" --target cuda >"$T/arch.txt" 2>"$T/arch.log"
rc=$?
[ $rc -eq 2 ] || fail "--target cuda: exit $rc, expected 2"
grep -q "cuda/sm_90" "$T/arch.log" || fail "--target cuda: no hint at cuda/sm_NN"

export KILN_FAKE_GPU_WORKER=1
SIM=sim/cuda/sm_90
"$KILN" tune --op "$OP" --target $SIM --max-trials-per-task 24 \
    --trials-per-iter 8 --db "$T/db" --seed 2 "${TEVAL[@]}" \
    >"$T/out.txt" 2>"$T/tune.log"
rc=$?
if [ $rc -eq 69 ] && grep -q "NVRTC\|nvrtc" "$T/tune.log"; then
    echo "SKIP: the agent cannot load NVRTC"; exit 77
fi
[ $rc -eq 0 ] || fail "fake GPU: kiln tune exited $rc"
grep -q "^trials *24 (24 valid" "$T/out.txt" || fail "not 24 valid trials"
grep -q "^best .*simulated" "$T/out.txt" || fail "best not labelled simulated"
src=$(sed -n 's/^source *//p' "$T/out.txt")
case $src in *.sim_cuda_sm_90.cu) ;; *) fail "best source '$src' is not a .cu" ;; esac
[ -f "$src" ] || fail "best source '$src' not written"
grep -q '^extern "C" __global__ void __launch_bounds__' "$src" ||
    fail "best source is not a CUDA kernel"
grep -q "^kl_main(" "$src" || fail "best source has no kl_main"

"$KILN" tune --op "$OP" --target $SIM --max-trials-per-task 24 \
    --db "$T/db" "${TEVAL[@]}" >"$T/out2.txt" 2>"$T/tune2.log" ||
    fail "resumed run exited $?"
grep -q "24 restored" "$T/out2.txt" || fail "resumed run did not restore 24"

# The fake GPU never passes for the real one: no agent serves cuda/sm_90,
# and its records are no result of cuda/sm_90.
"$KILN" tune --op "$OP" --target cuda/sm_90 --max-trials-per-task 8 \
    --db "$T/db" --agent-wait-s 2 "${TEVAL[@]}" >"$T/real.txt" 2>"$T/real.log"
[ $? -eq 1 ] || fail "cuda/sm_90 on a fake GPU: expected exit 1"
grep -q "no agent for target 'cuda/sm_90'" "$T/real.log" ||
    fail "cuda/sm_90 on a fake GPU: $(tail -3 "$T/real.log")"
"$KILN" db best --db "$T/db" --name matmul_128_128_64 --target cuda/sm_90 \
    >/dev/null 2>&1
[ $? -eq 3 ] || fail "db best cuda/sm_90: a simulated record counted as valid"

"$KILN" db best --db "$T/db" --name matmul_128_128_64 --target $SIM \
    --source >"$T/best.txt" 2>"$T/best.log" || fail "kiln db best exited $?"
grep -q "^target *$SIM" "$T/best.txt" || fail "db best: not the CUDA record"
grep -q "^latency .*(simulated)" "$T/best.txt" || fail "db best: not labelled"
sed -n '/^source$/,$p' "$T/best.txt" | tail -n +3 >"$T/best.cu"
tail -n +2 "$src" >"$T/tuned.cu"
[ -s "$T/best.cu" ] || fail "db best --source printed no source"
cmp -s "$T/best.cu" "$T/tuned.cu" ||
    fail "db best --source differs from the tuned kernel"
echo PASS
