#!/usr/bin/env bash
# kiln tune --strategy evolutionary on a 64x64x64 matmul, 40 trials on a
# local fleet (small population, the cost model used after 16 results),
# then a second run on the same store up to 56 trials: it restores the 40
# records, measures 16 new candidates, and no trace is ever measured twice.
# The best record is always a verified one.
. "$(dirname "$0")/lib.sh"
OP="matmul M=64 N=64 K=64"
TEVAL=(--repeat 3 --min-repeat-ms 0 --timeout-ms 5000 --no-flush)
SEARCH=(--strategy evolutionary --population 64 --generations 2
        --model-min-rows 16 --trials-per-iter 8)

start=$(date +%s)
"$KILN" tune --op "$OP" "${SEARCH[@]}" --max-trials-per-task 40 \
    --db "$T/db" --seed 1 "${TEVAL[@]}" >"$T/out.txt" 2>"$T/tune.log" ||
    fail "kiln tune exited $?"
echo "40 trials in $(( $(date +%s) - start )) s"
grep -q "^best .* us, .* GFLOP/s" "$T/out.txt" || fail "no best latency printed"
"$TUNE_CHECK" "$T/db" 40 >"$T/check.txt" || { cat "$T/check.txt"; fail "store check failed"; }
cat "$T/check.txt"
grep -q "^records=40 " "$T/check.txt" || fail "not exactly 40 trials recorded"
ok=$(sed -n 's/.* ok=\([0-9]*\) .*/\1/p' "$T/check.txt")
[ "$ok" -ge 20 ] || fail "only $ok of 40 candidates verified"
best1=$(sed -n 's/.*best_us=\([0-9.]*\).*/\1/p' "$T/check.txt")

# Second run: continues from the store.
"$KILN" tune --op "$OP" "${SEARCH[@]}" --max-trials-per-task 56 \
    --db "$T/db" --seed 2 "${TEVAL[@]}" >"$T/out2.txt" 2>"$T/tune2.log" ||
    fail "second kiln tune exited $?"
grep -qE "40 records of matmul_64_64_64 on cpu[^ ]* restored" "$T/tune2.log" ||
    fail "second run did not restore the 40 records"
grep -q "^trials .*56 (.*40 restored" "$T/out2.txt" || fail "second run did not stop at 56"
"$TUNE_CHECK" "$T/db" 56 >"$T/check2.txt" || { cat "$T/check2.txt"; fail "store check failed after the second run"; }
cat "$T/check2.txt"
grep -q "^records=56 dups=0\|^records=56 " "$T/check2.txt" || fail "not exactly 56 records"
best2=$(sed -n 's/.*best_us=\([0-9.]*\).*/\1/p' "$T/check2.txt")
awk -v a="$best1" -v b="$best2" 'BEGIN { exit !(b <= a) }' ||
    fail "best got worse across runs ($best1 -> $best2 us)"

# A run whose cap is already reached measures nothing.
"$KILN" tune --op "$OP" "${SEARCH[@]}" --max-trials-per-task 56 \
    --db "$T/db" "${TEVAL[@]}" >"$T/out3.txt" 2>"$T/tune3.log" ||
    fail "third kiln tune exited $?"
grep -q "listening" "$T/tune3.log" && fail "third run started a fleet with nothing to do"
"$TUNE_CHECK" "$T/db" 56 | grep -q "^records=56 " || fail "third run changed the store"
echo PASS
