#!/usr/bin/env bash
# kiln tune on a quantized matmul (u8 x const s8, zero point, bias,
# per-channel requant; N not a multiple of the intrinsic's lanes, K not of
# 4) on a local fleet: every candidate of the CPU design space is a
# tensorized kernel (vpdpbusd on an avx512 target, the exact AVX2 fallback
# on avx2), and the agent verifies every output bit for bit against the
# reference: all 16 trials are valid, the store holds 16 verified records,
# and the best trace and source are the tensorized ones; `kiln db best
# --source` regenerates the same source from the record. The records'
# target carries the CPU feature the intrinsic needs
# (cpu/x86_64-avx512+vnni with AVX-512 VNNI, cpu/x86_64-avx2+avxvnni with
# AVX-VNNI); a CPU played without it (KILN_CPU_FEATURES=) keys its records
# on the plain target with the exact AVX2 kernels; and a job for the
# refined target is never served by an agent without the feature.
. "$(dirname "$0")/lib.sh"
OP="qmatmul M=64 N=40 K=30 za=7 bias=1 zo=3"
TEVAL=(--repeat 3 --min-repeat-ms 0 --timeout-ms 5000 --no-flush)
grep -qw avx2 /proc/cpuinfo || { echo "SKIP: no AVX2 on this CPU"; exit 77; }
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { grep -qw "$1" <<<"$flags"; }
if has avx512f; then
    BASE=cpu/x86_64-avx512 FEAT=vnni
    if has avx512_vnni; then EXACT=$BASE+vnni IN=avx512_vnni; else EXACT=$BASE IN=avx2_i8; fi
else
    BASE=cpu/x86_64-avx2 FEAT=avxvnni
    if has avx_vnni; then EXACT=$BASE+avxvnni IN=avx_vnni; else EXACT=$BASE IN=avx2_i8; fi
fi

"$KILN" tune --op "$OP" --strategy replay --max-trials-per-task 16 \
    --trials-per-iter 8 --db "$T/db" --seed 1 "${TEVAL[@]}" \
    >"$T/out.txt" 2>"$T/tune.log" || { tail -5 "$T/tune.log"; fail "kiln tune exited $?"; }
cat "$T/out.txt" | head -3
grep -q "trials 16/16 (16 valid" "$T/tune.log" || { tail -3 "$T/tune.log"; fail "not all 16 candidates valid"; }
grep -q "^best .* us, .* GFLOP/s" "$T/out.txt" || fail "no best latency printed"
grep -q "tensorize(l[0-9]*, intrin=\"$IN\"" "$T/out.txt" || fail "best trace is not tensorized with $IN"
grep -q "^workload .*($EXACT)\$" "$T/out.txt" || fail "task target is not $EXACT: $(head -1 "$T/out.txt")"
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
grep -q "^target *$EXACT\$" "$T/best.txt" || fail "the best record's target is not $EXACT"
"$KILN" db best --db "$T/db" --name "$name" --target cpu >"$T/best2.txt" 2>&1 ||
    fail "db best --target cpu: $(cat "$T/best2.txt")"
grep -q "^target *$EXACT\$" "$T/best2.txt" || fail "--target cpu is not $EXACT for an integer workload"

# The same CPU played without the feature: plain target, AVX2 kernels,
# all exact; the records are apart from those above. A CPU without the
# feature tuned on the plain target already (EXACT = BASE): its run goes
# to a store of its own, or it would restore the 16 records above.
PLAIN_DB=$T/db
[ "$EXACT" != "$BASE" ] || PLAIN_DB=$T/db_plain
KILN_CPU_FEATURES= "$KILN" tune --op "$OP" --strategy replay --max-trials-per-task 8 \
    --trials-per-iter 8 --db "$PLAIN_DB" --seed 1 "${TEVAL[@]}" \
    >"$T/plain.txt" 2>"$T/plain.log" || fail "kiln tune without features exited $?"
grep -q "^workload .*($BASE)\$" "$T/plain.txt" || fail "no-feature target: $(head -1 "$T/plain.txt")"
grep -q "trials 8/8 (8 valid, 0 restored" "$T/plain.log" ||
    fail "no-feature run: $(tail -1 "$T/plain.log")"
grep -q 'intrin="avx2_i8"' "$T/plain.txt" || fail "no-feature run is not avx2_i8"
"$KILN" db best --db "$PLAIN_DB" --name "$name" --target "$BASE" >"$T/best3.txt" ||
    fail "db best --target $BASE"
grep -q "^target *$BASE\$" "$T/best3.txt" || fail "no record on $BASE"

# A job for $BASE+$FEAT with only an agent without $FEAT connected: no
# agent serves it, though one of $BASE joined.
KILN_CPU_FEATURES=$FEAT KILN_LOG=info "$KILN" tune --op "$OP" --db "$T/db3" \
    --listen 'tcp://127.0.0.1:*' --insecure --agent-wait-s 3 \
    --max-trials-per-task 8 >"$T/r.txt" 2>"$T/r.log" &
TUNE_PID=$!
PIDS+=("$TUNE_PID")
wait_for 10 grep -q "listening on" "$T/r.log" || fail "kiln tune did not bind"
EP=$(sed -n 's/^kiln tune: listening on \(tcp:[^ ]*\).*/\1/p' "$T/r.log" | head -1)
KILN_CPU_FEATURES= "$KILN_AGENT" --connect "$EP" --insecure --name plain \
    --heartbeat-ms 200 2>"$T/agent.log" &
PIDS+=("$!")
wait "$TUNE_PID"
[ $? -eq 1 ] || fail "a $BASE+$FEAT job served only by an agent without $FEAT must fail"
grep -q "agent plain .* joined: $BASE, credit" "$T/r.log" || fail "the plain agent did not join as $BASE"
grep -q "no agent for target '$BASE+$FEAT'" "$T/r.log" || fail "$(tail -3 "$T/r.log")"
grep -q "^trials *0 (0 valid" "$T/r.txt" || fail "$(head -2 "$T/r.txt")"
echo PASS
