#!/usr/bin/env bash
# kiln tune on a quantized NHWC convolution (qconv2d: 3x3, pad 1, stride 2,
# a zero point read at the padded border, bias, per-tensor requant, u8 out,
# K not a multiple of the lanes), then on an NCHW one as the ONNX importer
# writes it (per-channel scale, bias, relu; X repacked per call into the
# padded scratch) on a local fleet: every candidate of the
# CPU design space is a tensorized convolution (vpdpbusd on an avx512+vnni
# target, the exact AVX2 fallback otherwise), the agent verifies every
# output bit for bit against the reference: all 12 trials are valid, the
# store holds 12 verified records, and `kiln db best --source` regenerates
# the tuned source from the record.
. "$(dirname "$0")/lib.sh"
TEVAL=(--repeat 3 --min-repeat-ms 0 --timeout-ms 5000 --no-flush)
grep -qw avx2 /proc/cpuinfo || { echo "SKIP: no AVX2 on this CPU"; exit 77; }
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { grep -qw "$1" <<<"$flags"; }
if has avx512f; then
    if has avx512_vnni; then IN=avx512_vnni; else IN=avx2_i8; fi
else
    if has avx_vnni; then IN=avx_vnni; else IN=avx2_i8; fi
fi

run_case() {
    local OP=$1 D=$2 src name ok
    mkdir -p "$D"
    "$KILN" tune --op "$OP" --strategy replay --max-trials-per-task 12 \
        --trials-per-iter 6 --db "$D/db" --seed 1 "${TEVAL[@]}" \
        >"$D/out.txt" 2>"$D/tune.log" || { tail -5 "$D/tune.log"; fail "kiln tune exited $?"; }
    head -3 "$D/out.txt"
    grep -q "trials 12/12 (12 valid" "$D/tune.log" || { tail -3 "$D/tune.log"; fail "not all 12 candidates valid"; }
    grep -q "tensorize(l[0-9]*, intrin=\"$IN\"" "$D/out.txt" || fail "best trace is not tensorized with $IN"
    src=$(sed -n 's/^source *//p' "$D/out.txt")
    [ -f "$src" ] || fail "best source '$src' not written"
    grep -q "kl_zrow" "$src" || fail "best source is not the tensorized convolution"

    "$TUNE_CHECK" "$D/db" 12 >"$D/check.txt" || { cat "$D/check.txt"; fail "store check failed"; }
    cat "$D/check.txt"
    grep -q "^records=12 " "$D/check.txt" || fail "not exactly 12 trials recorded"
    ok=$(sed -n 's/.* ok=\([0-9]*\) .*/\1/p' "$D/check.txt")
    [ "$ok" -eq 12 ] || fail "only $ok of 12 candidates verified"

    name=$(sed -n 's/^workload *\([^ ]*\) .*/\1/p' "$D/out.txt")
    "$KILN" db best --db "$D/db" --name "$name" --source \
        >"$D/best.txt" 2>"$D/best.log" || fail "kiln db best exited $?"
    sed -n '/^source$/,$p' "$D/best.txt" | tail -n +2 >"$D/best.c"
    cmp -s "$D/best.c" "$src" || fail "db best --source differs from the tuned source"
}

run_case "qconv2d N=1 C=12 H=9 W=9 K=24 R=3 S=3 pad=1 stride=2 za=7 bias=1 layout=NHWC" "$T/nhwc"
run_case "qconv2d N=1 C=12 H=9 W=9 K=24 R=3 S=3 pad=1 stride=2 za=7 zo=0 scale=channel bias=1 relu=1" "$T/nchw"
grep -q "kl_scr" "$T/nchw/best.c" || fail "the NCHW source does not repack X"
echo PASS
