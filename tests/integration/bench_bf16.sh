#!/usr/bin/env bash
# tools/bench/bench_bf16 on small shapes: oneDNN's bf16 and f32 matmuls are
# timed and named (the implementation oneDNN picked), kiln's best f32
# record of a freshly tuned store joins them and passes the sampled exact
# check, the missing kiln bf16 record is a "no record" row (not an error,
# exit 0), and so is every ResNet-18 3x3 layer's kiln row beside oneDNN's
# bf16 and f32 convolutions; a store that is not a bf16 matmul given as
# --db is refused (exit 2) with a message naming what it holds. Skipped
# (77) where the CPU has no AVX512-BF16: oneDNN's bf16 matmul would then
# be its slow reference, nothing this test is about.
. "$(dirname "$0")/lib.sh"
grep -qw avx512_bf16 /proc/cpuinfo || { echo "SKIP: no AVX512-BF16 on this CPU"; exit 77; }
[ -x "${BENCH_BF16:-}" ] || { echo "SKIP: bench_bf16 not built (no libdnnl)"; exit 77; }
export OMP_NUM_THREADS=2 OMP_PROC_BIND=close
"$KILN" tune --op "matmul M=64 N=64 K=64" --max-trials-per-task 4 \
    --trials-per-iter 4 --db "$T/f32.db" --seed 1 "${EVAL[@]}" \
    >"$T/tune.out" 2>"$T/tune.log" || fail "kiln tune exited $?"
"$BENCH_BF16" --size 64 --rounds 3 --f32-db "$T/f32.db" \
    --workdir "$T/work" >"$T/bench.out" 2>"$T/bench.log" ||
    { cat "$T/bench.out"; fail "bench_bf16 exited $?"; }
o="$T/bench.out"
grep -q "^oneDNN bf16 matmul implementation: ..*" "$o" || fail "no oneDNN bf16 implementation printed"
grep -q "^oneDNN bf16 .* GFLOP/s" "$o" || fail "no oneDNN bf16 row"
grep -q "^oneDNN f32 .* GFLOP/s" "$o" || fail "no oneDNN f32 row"
grep -q "^kiln f32 .* GFLOP/s  cpu/x86_64" "$o" || fail "no kiln f32 row"
grep -q "^kiln bf16 *no record" "$o" || fail "the missing bf16 record is not a 'no record' row"
grep -q "^ratio oneDNN bf16 / oneDNN f32: *[0-9]" "$o" || fail "no oneDNN bf16 / f32 ratio"
grep -q "^ratio kiln bf16 / kiln f32: *- (kiln bf16: no record)" "$o" || fail "ratio without a record"
for s in "oneDNN bf16" "oneDNN f32" "kiln f32"; do
    grep -q "^check $s .*: ok\$" "$o" || fail "$s output not checked ok"
done
n=$(grep -c "^conv2d_1_.*_3_3_.* no record " "$o")
[ "$n" = 11 ] || fail "$n ResNet-18 3x3 layers in the table, want 11"
"$BENCH_BF16" --size 64 --rounds 3 --db "$T/f32.db" --no-conv \
    --workdir "$T/work2" >"$T/bad.out" 2>"$T/bad.log"
rc=$?
[ "$rc" = 2 ] || fail "an f32 store as --db: exit $rc, want 2"
grep -q "holds matmul_64_64_64, not a plain in=bf16 matmul" "$T/bad.log" ||
    fail "the refusal does not name the store's workload: $(cat "$T/bad.log")"
echo "ok: bench_bf16 rows, checks and refusals"
