#!/usr/bin/env bash
# kiln tune on a quantized matmul (u8 x const s8, zero point, bias,
# per-channel requant; N not a multiple of the intrinsic's lanes, K not of
# 4) on a local fleet: every candidate of the CPU design space is a
# tensorized kernel (vpdpbusd on an avx512 target, the exact AVX2 fallback
# on avx2), and the agent verifies every output bit for bit against the
# reference: all 16 trials are valid, the store holds 16 verified records,
# and the best trace and source are the tensorized ones; `kiln db best
# --source` regenerates the same source from the record.
. "$(dirname "$0")/lib.sh"
OP="qmatmul M=64 N=40 K=30 za=7 bias=1 zo=3"
TEVAL=(--repeat 3 --min-repeat-ms 0 --timeout-ms 5000 --no-flush)
grep -qw avx2 /proc/cpuinfo || { echo "SKIP: no AVX2 on this CPU"; exit 77; }

"$KILN" tune --op "$OP" --strategy replay --max-trials-per-task 16 \
    --trials-per-iter 8 --db "$T/db" --seed 1 "${TEVAL[@]}" \
    >"$T/out.txt" 2>"$T/tune.log" || { tail -5 "$T/tune.log"; fail "kiln tune exited $?"; }
cat "$T/out.txt" | head -3
grep -q "trials 16/16 (16 valid" "$T/tune.log" || { tail -3 "$T/tune.log"; fail "not all 16 candidates valid"; }
grep -q "^best .* us, .* GFLOP/s" "$T/out.txt" || fail "no best latency printed"
grep -q "tensorize(l[0-9]*, intrin=\"avx" "$T/out.txt" || fail "best trace is not tensorized"
src=$(sed -n 's/^source *//p' "$T/out.txt")
[ -f "$src" ] || fail "best source '$src' not written"
grep -q "#pragma GCC target" "$src" || fail "best source carries no target pragma"
grep -q "kl_main_prepare" "$src" || fail "best source has no prepare step"

"$TUNE_CHECK" "$T/db" 16 >"$T/check.txt" || { cat "$T/check.txt"; fail "store check failed"; }
cat "$T/check.txt"
grep -q "^records=16 " "$T/check.txt" || fail "not exactly 16 trials recorded"
ok=$(sed -n 's/.* ok=\([0-9]*\) .*/\1/p' "$T/check.txt")
[ "$ok" -eq 16 ] || fail "only $ok of 16 candidates verified"

# The record's trace regenerates the same tensorized source.
name=$(sed -n 's/^workload *\([^ ]*\) .*/\1/p' "$T/out.txt")
"$KILN" db best --db "$T/db" --name "$name" --source \
    >"$T/best.txt" 2>"$T/best.log" || fail "kiln db best exited $?"
grep -q "tensorize(l" "$T/best.txt" || fail "db best shows no tensorize"
sed -n '/^source$/,$p' "$T/best.txt" | tail -n +2 >"$T/best.c"
cmp -s "$T/best.c" "$src" || fail "db best --source differs from the tuned source"
echo PASS
