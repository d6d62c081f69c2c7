#!/usr/bin/env bash
# kiln measure on integer arguments (u8 / s8 / s32 with an f32 per-channel
# scale): a quantized matmul C = requant((A - 128) x B + bias, scale) on a
# local agent. A correct candidate (another loop order, B prepared once)
# is OK; one off by one at a single element is WRONG_RESULT, its error
# naming that element and both values (integer outputs compare exactly,
# however small the difference); on outputs made to hit rounding ties, a
# candidate that rounds half to even (rintf) matches the nearbyintf
# reference and one that rounds half away from zero (roundf) is
# WRONG_RESULT. A bad dtype in --args is refused with the known list.
. "$(dirname "$0")/lib.sh"
M=16 N=8 K=32
IARGS="A:u8[$M,$K] B:s8[$K,$N]:const bias:s32[$N]:const scale:f32[$N]:const C:u8[$M,$N]:out"
# body FILE LOOP_ORDER EXTRA: a qmatmul kernel; EXTRA runs after the loop.
body() {
    cat >"$1" <<C
#include <math.h>
#include <stdint.h>
void kernel(void *const *args)
{
    const uint8_t *A = args[0];
    const int8_t *B = args[1];
    const int32_t *bias = args[2];
    const float *scale = args[3];
    uint8_t *C = args[4];
    int32_t acc[$M * $N];
    for (int x = 0; x < $M * $N; x++)
        acc[x] = 0;
    $2
        acc[i * $N + j] += ((int32_t)A[i * $K + k] - 128) * B[k * $N + j];
    for (int i = 0; i < $M; i++)
        for (int j = 0; j < $N; j++) {
            float r = ROUND((float)(acc[i * $N + j] + bias[j]) * scale[j]);
            int64_t v = (int64_t)r + 3;
            C[i * $N + j] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    $3
}
C
}
IJK="for (int i = 0; i < $M; i++) for (int j = 0; j < $N; j++) for (int k = 0; k < $K; k++)"
KIJ="for (int k = 0; k < $K; k++) for (int i = 0; i < $M; i++) for (int j = 0; j < $N; j++)"
body "$T/ref.c" "$IJK" ""
sed -i 's/ROUND(/nearbyintf(/' "$T/ref.c"
body "$T/ok.c" "$KIJ" ""
sed -i 's/ROUND(/nearbyintf(/' "$T/ok.c"
body "$T/off1.c" "$KIJ" "C[37] = C[37] == 255 ? 254 : C[37] + 1;"
sed -i 's/ROUND(/nearbyintf(/' "$T/off1.c"

"$KILN" measure --args "$IARGS" --reference "$T/ref.c" --local-agents 1 \
    "${EVAL[@]}" --json "$T/ok.c" "$T/off1.c" \
    >"$T/out.json" 2>"$T/measure.log" || fail "kiln measure exited $?"
status_of() { # FILE: the status of FILE's result in out.json
    grep -F -A14 "\"file\":\"${1//\//\\/}\"" "$T/out.json" |
        sed -n 's/.*"status":"\([A-Z_]*\)".*/\1/p' | head -1
}
[ "$(status_of "$T/ok.c")" = OK ] ||
    { cat "$T/out.json"; fail "the correct integer candidate is not OK"; }
[ "$(status_of "$T/off1.c")" = WRONG_RESULT ] ||
    { cat "$T/out.json"; fail "an off-by-one integer candidate is not WRONG_RESULT"; }
grep -Eq 'output 4 element 37 is [0-9]+, expected [0-9]+ \(integer outputs must match exactly\)' "$T/out.json" ||
    { cat "$T/out.json"; fail "the error does not name element 37 and both values"; }
grep -q '1 of 128 elements wrong' "$T/out.json" ||
    { cat "$T/out.json"; fail "the error does not count exactly one wrong element"; }

# Ties: C = sat(rnd((bias[j] % 100 + i) * 0.5) + 100) stays inside
# 0..255, and over 16 consecutive i every residue mod 4 occurs, so both
# x.5 with an even floor (half to even and half away differ) and with an
# odd one occur. nearbyintf (the reference) vs roundf must differ.
ties() { # FILE ROUNDING
    cat >"$1" <<C
#include <math.h>
#include <stdint.h>
void kernel(void *const *args)
{
    const int32_t *bias = args[2];
    uint8_t *C = args[4];
    for (int i = 0; i < $M; i++)
        for (int j = 0; j < $N; j++)
            C[i * $N + j] = (uint8_t)((int)$2((float)(bias[j] % 100 + i) * 0.5f) + 100);
}
C
}
ties "$T/ref_half.c" nearbyintf
ties "$T/even.c" rintf
ties "$T/away.c" roundf
"$KILN" measure --args "$IARGS" --reference "$T/ref_half.c" --local-agents 1 \
    "${EVAL[@]}" --json "$T/even.c" "$T/away.c" \
    >"$T/out2.json" 2>"$T/measure2.log" || fail "kiln measure (ties) exited $?"
status2() {
    grep -F -A14 "\"file\":\"${1//\//\\/}\"" "$T/out2.json" |
        sed -n 's/.*"status":"\([A-Z_]*\)".*/\1/p' | head -1
}
[ "$(status2 "$T/even.c")" = OK ] ||
    { cat "$T/out2.json"; fail "rintf (half to even) does not match nearbyintf"; }
[ "$(status2 "$T/away.c")" = WRONG_RESULT ] ||
    { cat "$T/out2.json"; fail "rounding half away from zero passed as half to even"; }

# An unknown dtype names the ones known.
"$KILN" measure --args "A:u4[4] C:u8[4]:out" --reference "$T/ref.c" \
    "$T/ok.c" >"$T/bad.txt" 2>&1 && fail "--args with u4 was accepted"
grep -q "not one of f32, f16, bf16, u8, s8, s32" "$T/bad.txt" ||
    { cat "$T/bad.txt"; fail "the dtype error does not list u8, s8, s32"; }
echo PASS
