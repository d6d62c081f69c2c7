#!/usr/bin/env bash
# kiln measure on integer arguments (u8 / s8 / s32 with an f32 per-channel
# scale): a quantized matmul C = requant((A - 128) x B + bias, scale) on a
# local agent. A correct candidate (sum A*B minus 128 * colsum(B), the
# column sums prepared once from the const B) is OK; one off by one at a single element is WRONG_RESULT, its error
# naming that element and both values (integer outputs compare exactly,
# however small the difference); on outputs made to hit rounding ties, a
# candidate that rounds half to even (rintf) matches the nearbyintf
# reference and one that rounds half away from zero (roundf) is
# WRONG_RESULT. The same for a plain s32 accumulator output. A bad dtype
# in --args is refused with the known list.
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
# The correct candidate uses the zero-point compensation: sum A*B in
# int32, minus 128 * colsum(B), the column sums prepared once from the
# constant B (kernel_prepare, common/kl_abi.h).
cat >"$T/ok.c" <<C
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
void *kernel_prepare(void *const *args)
{
    const int8_t *B = args[1];
    int32_t *colsum = calloc($N, sizeof *colsum);
    if (!colsum)
        return NULL;
    for (int k = 0; k < $K; k++)
        for (int j = 0; j < $N; j++)
            colsum[j] += B[k * $N + j];
    return colsum;
}
void kernel(void *const *args)
{
    const uint8_t *A = args[0];
    const int8_t *B = args[1];
    const int32_t *bias = args[2], *colsum = args[5];
    const float *scale = args[3];
    uint8_t *C = args[4];
    for (int i = 0; i < $M; i++)
        for (int j = 0; j < $N; j++) {
            int32_t s = 0;
            for (int k = 0; k < $K; k++)
                s += A[i * $K + k] * B[k * $N + j];
            s -= 128 * colsum[j];
            float r = nearbyintf((float)(s + bias[j]) * scale[j]);
            int64_t v = (int64_t)r + 3;
            C[i * $N + j] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
}
C
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

# The accumulator itself: C:s32 out, exact too (an s32 output that is
# off by one among values around 10^5 is still wrong).
SARGS="A:u8[$M,$K] B:s8[$K,$N]:const C:s32[$M,$N]:out"
acc() { # FILE EXTRA
    cat >"$1" <<C
#include <stdint.h>
void kernel(void *const *args)
{
    const uint8_t *A = args[0];
    const int8_t *B = args[1];
    int32_t *C = args[2];
    for (int i = 0; i < $M; i++)
        for (int j = 0; j < $N; j++) {
            int32_t s = 0;
            for (int k = 0; k < $K; k++)
                s += A[i * $K + k] * B[k * $N + j];
            C[i * $N + j] = s;
        }
    $2
}
C
}
acc "$T/ref32.c" ""
acc "$T/ok32.c" "/* same */"
acc "$T/off32.c" "C[100] -= 1;"
"$KILN" measure --args "$SARGS" --reference "$T/ref32.c" --local-agents 1 \
    "${EVAL[@]}" --json "$T/ok32.c" "$T/off32.c" \
    >"$T/out3.json" 2>"$T/measure3.log" || fail "kiln measure (s32) exited $?"
status3() {
    grep -F -A14 "\"file\":\"${1//\//\\/}\"" "$T/out3.json" |
        sed -n 's/.*"status":"\([A-Z_]*\)".*/\1/p' | head -1
}
[ "$(status3 "$T/ok32.c")" = OK ] ||
    { cat "$T/out3.json"; fail "the correct s32 candidate is not OK"; }
[ "$(status3 "$T/off32.c")" = WRONG_RESULT ] ||
    { cat "$T/out3.json"; fail "an s32 output off by one is not WRONG_RESULT"; }
grep -Eq 'output 2 element 100 is -?[0-9]+, expected -?[0-9]+' "$T/out3.json" ||
    { cat "$T/out3.json"; fail "the s32 error does not name element 100"; }

# An unknown dtype names the ones known.
"$KILN" measure --args "A:u4[4] C:u8[4]:out" --reference "$T/ref.c" \
    "$T/ok.c" >"$T/bad.txt" 2>&1 && fail "--args with u4 was accepted"
grep -q "not one of f32, f16, bf16, u8, s8, s32" "$T/bad.txt" ||
    { cat "$T/bad.txt"; fail "the dtype error does not list u8, s8, s32"; }
echo PASS
