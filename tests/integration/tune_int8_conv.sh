#!/usr/bin/env bash
# kiln tune on a quantized NHWC convolution (qconv2d: 3x3, pad 1, stride 2,
# a zero point read at the padded border, bias, per-tensor requant, u8 out,
# K not a multiple of the lanes) on a local fleet: every candidate of the
# CPU design space is a tensorized convolution (vpdpbusd on an avx512+vnni
# target, the exact AVX2 fallback otherwise), the agent verifies every
# output bit for bit against the reference: all 12 trials are valid, the
# store holds 12 verified records, and `kiln db best --source` regenerates
# the tuned source from the record.
. "$(dirname "$0")/lib.sh"
OP="qconv2d N=1 C=12 H=9 W=9 K=24 R=3 S=3 pad=1 stride=2 za=7 bias=1 layout=NHWC"
TEVAL=(--repeat 3 --min-repeat-ms 0 --timeout-ms 5000 --no-flush)
grep -qw avx2 /proc/cpuinfo || { echo "SKIP: no AVX2 on this CPU"; exit 77; }
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { grep -qw "$1" <<<"$flags"; }
if has avx512f; then
    if has avx512_vnni; then IN=avx512_vnni; else IN=avx2_i8; fi
else
    if has avx_vnni; then IN=avx_vnni; else IN=avx2_i8; fi
fi

"$KILN" tune --op "$OP" --strategy replay --max-trials-per-task 12 \
    --trials-per-iter 6 --db "$T/db" --seed 1 "${TEVAL[@]}" \
    >"$T/out.txt" 2>"$T/tune.log" || { tail -5 "$T/tune.log"; fail "kiln tune exited $?"; }
head -3 "$T/out.txt"
grep -q "trials 12/12 (12 valid" "$T/tune.log" || { tail -3 "$T/tune.log"; fail "not all 12 candidates valid"; }
grep -q "tensorize(l[0-9]*, intrin=\"$IN\"" "$T/out.txt" || fail "best trace is not tensorized with $IN"
src=$(sed -n 's/^source *//p' "$T/out.txt")
[ -f "$src" ] || fail "best source '$src' not written"
grep -q "kl_zrow" "$src" || fail "best source is not the tensorized convolution"

"$TUNE_CHECK" "$T/db" 12 >"$T/check.txt" || { cat "$T/check.txt"; fail "store check failed"; }
cat "$T/check.txt"
grep -q "^records=12 " "$T/check.txt" || fail "not exactly 12 trials recorded"
ok=$(sed -n 's/.* ok=\([0-9]*\) .*/\1/p' "$T/check.txt")
[ "$ok" -eq 12 ] || fail "only $ok of 12 candidates verified"

name=$(sed -n 's/^workload *\([^ ]*\) .*/\1/p' "$T/out.txt")
"$KILN" db best --db "$T/db" --name "$name" --source \
    >"$T/best.txt" 2>"$T/best.log" || fail "kiln db best exited $?"
sed -n '/^source$/,$p' "$T/best.txt" | tail -n +2 >"$T/best.c"
cmp -s "$T/best.c" "$src" || fail "db best --source differs from the tuned source"
echo PASS
