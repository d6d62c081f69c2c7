#!/usr/bin/env bash
# kiln tune --strategy replay on a 64x64x64 matmul, 40 trials on a local
# fleet (one kiln-agent, ephemeral CURVE keys), short evaluator settings.
# The store holds exactly 40 records, no trace twice, and its best record
# is a verified one (the fastest of them); the best source is written and
# `kiln db best --source` regenerates the same code.
. "$(dirname "$0")/lib.sh"
OP="matmul M=64 N=64 K=64"
TEVAL=(--repeat 3 --min-repeat-ms 0 --timeout-ms 5000 --no-flush)

start=$(date +%s)
"$KILN" tune --op "$OP" --strategy replay --max-trials-per-task 40 \
    --trials-per-iter 8 --db "$T/db" --seed 1 "${TEVAL[@]}" \
    >"$T/out.txt" 2>"$T/tune.log" || fail "kiln tune exited $?"
echo "40 trials in $(( $(date +%s) - start )) s"
grep -q "listening on tcp://127.0.0.1:" "$T/tune.log" || fail "no loopback endpoint"
grep -q "trials 40/40" "$T/tune.log" || fail "no progress line reached 40/40"
grep -q "ETA" "$T/tune.log" || fail "progress lines without ETA"
grep -q "^best .* us, .* GFLOP/s" "$T/out.txt" || fail "no best latency printed"
grep -q "sample_perfect_tile" "$T/out.txt" || fail "no best trace printed"
src=$(sed -n 's/^source *//p' "$T/out.txt")
[ -f "$src" ] || fail "best source '$src' not written"
grep -q "void kl_main" "$src" || fail "best source has no kl_main"

"$TUNE_CHECK" "$T/db" 40 >"$T/check.txt" || { cat "$T/check.txt"; fail "store check failed"; }
cat "$T/check.txt"
grep -q "^records=40 " "$T/check.txt" || fail "not exactly 40 trials recorded"
ok=$(sed -n 's/.* ok=\([0-9]*\) .*/\1/p' "$T/check.txt")
[ "$ok" -ge 20 ] || fail "only $ok of 40 candidates verified"

"$KILN" db best --db "$T/db" --name matmul_64_64_64 --source \
    >"$T/best.txt" 2>"$T/best.log" || fail "kiln db best exited $?"
grep -q "sample_perfect_tile" "$T/best.txt" || fail "db best shows no trace text"
sed -n '/^source$/,$p' "$T/best.txt" | tail -n +2 >"$T/best.c"
cmp -s "$T/best.c" "$src" || fail "db best --source differs from the tuned source"
echo PASS
