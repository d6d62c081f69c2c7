#!/usr/bin/env bash
# kiln measure with a constant input (B:...:const, ROLE_CONSTANT on the
# wire) on a local agent: a kernel whose kernel_prepare transposes B once
# (common/kl_abi.h) is verified and timed, one whose prepare returns NULL
# is a RUNTIME_ERROR naming kernel_prepare, and a kernel without prepare
# still runs. A bad role suffix is refused.
. "$(dirname "$0")/lib.sh"
make_candidates "$T/c"
CARGS="A:f32[256,256] B:f32[256,256]:const C:f32[256,256]:out"
prep() { # FILE FIRST_LINE_OF_PREPARE
    cat >"$1" <<C
#include <stdlib.h>
void *kernel_prepare(void *const *args)
{
    $2
    if (args[0] || !args[1] || args[2] || args[3])
        abort(); /* only the constant B may be given */
    const float *B = args[1];
    float *Bt = malloc(256 * 256 * sizeof *Bt);
    if (!Bt)
        return NULL;
    for (int k = 0; k < 256; k++)
        for (int j = 0; j < 256; j++)
            Bt[j * 256 + k] = B[k * 256 + j];
    return Bt;
}
void kernel(void *const *args)
{
    const float *A = args[0], *Bt = args[3];
    float *C = args[2];
    if (!Bt)
        abort();
    for (int i = 0; i < 256; i++)
        for (int j = 0; j < 256; j++) {
            float s = 0;
            for (int k = 0; k < 256; k++)
                s += A[i * 256 + k] * Bt[j * 256 + k];
            C[i * 256 + j] = s;
        }
}
C
}
prep "$T/prep_ok.c" ""
prep "$T/prep_null.c" "return NULL;"

"$KILN" measure --args "$CARGS" --reference "$T/c/ref.c" --local-agents 1 \
    "${EVAL[@]}" --json "$T/prep_ok.c" "$T/prep_null.c" "$T/c/ok_ijk_0.c" \
    >"$T/out.json" 2>"$T/measure.log" || fail "kiln measure exited $?"
status_of() { # FILE: the status of FILE's result in out.json
    grep -F -A14 "\"file\":\"${1//\//\\/}\"" "$T/out.json" |
        sed -n 's/.*"status":"\([A-Z_]*\)".*/\1/p' | head -1
}
[ "$(status_of "$T/prep_ok.c")" = OK ] ||
    { cat "$T/out.json"; fail "the prepared kernel is not OK"; }
[ "$(status_of "$T/prep_null.c")" = RUNTIME_ERROR ] ||
    { cat "$T/out.json"; fail "a NULL prepare is not a RUNTIME_ERROR"; }
grep -q "kernel_prepare' returned NULL" "$T/out.json" ||
    { cat "$T/out.json"; fail "the error does not name kernel_prepare"; }
[ "$(status_of "$T/c/ok_ijk_0.c")" = OK ] ||
    { cat "$T/out.json"; fail "a kernel without prepare is not OK"; }

"$KILN" measure --args "A:f32[4] B:f32[4]:konst C:f32[4]:out" \
    --reference "$T/c/ref.c" "$T/prep_ok.c" >"$T/out" 2>"$T/err"
[ $? -eq 2 ] || fail "a bad role suffix is not a usage error"
grep -qF ":const or :in" "$T/err" || { cat "$T/err"; fail "no message"; }
echo PASS
