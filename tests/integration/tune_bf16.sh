#!/usr/bin/env bash
# A bf16 workload measured on the CPU: its bf16 inputs travel as f32 (the
# C ABI's float *) holding values a bf16 holds, so a plain f32 kernel of
# `matmul ... in=bf16` verifies against the reference, and a bf16 kernel's
# own conversion of them is exact. (1) kiln tune of "matmul M=64 N=64
# K=64 in=bf16", 8 trials on a local fleet: all 8 recorded and verified
# OK, measured with --rtol 1e-6 raised to the bf16 tolerance
# 8 * 64 * 2^-24 = 3.0517578125e-05 (kl_workload_rtol), as each record's
# evaluator says; the f32 matmul's records keep 1e-6. (2) kiln measure: a candidate that writes 1 where its input A is
# bf16-representable (low 16 bits zero) matches a reference writing 1
# everywhere with A declared bf16, and is WRONG_RESULT with A declared f32
# (so the check can fail).
. "$(dirname "$0")/lib.sh"
OP="matmul M=64 N=64 K=64 in=bf16"
TEVAL=(--repeat 3 --min-repeat-ms 0 --timeout-ms 5000 --no-flush)

"$KILN" tune --op "$OP" --max-trials-per-task 8 --trials-per-iter 8 \
    --db "$T/db" --seed 1 --rtol 1e-6 "${TEVAL[@]}" \
    >"$T/out.txt" 2>"$T/tune.log" || fail "kiln tune exited $?"
grep -q "^workload *matmul_64_64_64_bf16 " "$T/out.txt" ||
    { cat "$T/out.txt"; fail "not the bf16 workload"; }
grep -q "^best .* us, .* GFLOP/s" "$T/out.txt" || fail "no best latency printed"
"$TUNE_CHECK" "$T/db" 8 >"$T/check.txt" || { cat "$T/check.txt"; fail "store check failed"; }
cat "$T/check.txt"
grep -q "^records=8 " "$T/check.txt" || fail "not exactly 8 trials recorded"
ok=$(sed -n 's/.* ok=\([0-9]*\) .*/\1/p' "$T/check.txt")
[ "$ok" = 8 ] || { grep -h "WRONG\|rejected" "$T"/*.log | head; fail "only $ok of 8 candidates verified"; }
"$KILN" db export --db "$T/db" | grep '"type":"record"' >"$T/recs.jsonl"
[ "$(grep -c '"rtol":3.0517578125e-05,' "$T/recs.jsonl")" = 8 ] ||
    { head -2 "$T/recs.jsonl"; fail "the bf16 records were not verified with rtol 8*64*2^-24"; }
"$KILN" tune --op "matmul M=64 N=64 K=64" --max-trials-per-task 2 --trials-per-iter 2 \
    --db "$T/db32" --seed 1 --rtol 1e-6 "${TEVAL[@]}" \
    >"$T/out32.txt" 2>"$T/tune32.log" || fail "kiln tune (f32) exited $?"
"$KILN" db export --db "$T/db32" | grep '"type":"record"' >"$T/recs32.jsonl"
[ "$(grep -cE '"rtol":(1e-06|9.9999999999999995e-07),' "$T/recs32.jsonl")" = 2 ] ||
    { head -2 "$T/recs32.jsonl"; fail "the f32 records do not keep rtol 1e-6"; }

cat >"$T/ref.c" <<'C'
void kernel(void *const *args)
{
    float *C = args[1];
    for (int i = 0; i < 256; i++)
        C[i] = 1.0f;
}
C
cat >"$T/is_bf16.c" <<'C'
#include <stdint.h>
#include <string.h>
void kernel(void *const *args)
{
    const float *A = args[0];
    float *C = args[1];
    for (int i = 0; i < 256; i++) {
        uint32_t u;
        memcpy(&u, &A[i], sizeof u);
        C[i] = (u & 0xffffu) == 0 ? 1.0f : 0.0f;
    }
}
C
status_of() { # JSON: the status of its one result
    sed -n 's/.*"status":"\([A-Z_]*\)".*/\1/p' "$1" | head -1
}
for dt in bf16 f32; do
    "$KILN" measure --args "A:$dt[4,64] C:f32[4,64]:out" --reference "$T/ref.c" \
        --local-agents 1 "${EVAL[@]}" --json "$T/is_bf16.c" \
        >"$T/m_$dt.json" 2>"$T/measure_$dt.log" || fail "kiln measure ($dt) exited $?"
done
[ "$(status_of "$T/m_bf16.json")" = OK ] ||
    { cat "$T/m_bf16.json"; fail "a bf16 input holds values a bf16 does not"; }
[ "$(status_of "$T/m_f32.json")" = WRONG_RESULT ] ||
    { cat "$T/m_f32.json"; fail "f32 inputs are all bf16 values: the check cannot fail"; }
echo PASS
