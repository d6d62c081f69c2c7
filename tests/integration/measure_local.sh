#!/usr/bin/env bash
# kiln measure with a local fleet of 2 agents (ephemeral CURVE keys) on 40
# candidates of a 256x256 matmul: compile errors, segfaults, endless
# loops, wrong outputs and correct loop orders. Every candidate gets
# exactly one record with the right status; a second run measures nothing
# again, and a run of measured and new sources records each new result
# under its own source.
. "$(dirname "$0")/lib.sh"
make_candidates "$T/c"
mapfile -t files < <(cand_files "$T/c")
[ "${#files[@]}" -eq 40 ] || fail "expected 40 candidates, made ${#files[@]}"

start=$(date +%s)
"$KILN" measure --args "$ARGS" --reference "$T/c/ref.c" --local-agents 2 \
    --db "$T/db" --flop 33554432 "${EVAL[@]}" --json "${files[@]}" \
    >"$T/out.json" 2>"$T/measure.log" || fail "kiln measure exited $?"
echo "measured 40 candidates in $(( $(date +%s) - start )) s"
grep -q "listening on tcp://127.0.0.1:" "$T/measure.log" || fail "no loopback endpoint"
grep -q "insecure" "$T/measure.log" && fail "the local fleet ran without CURVE"
[ "$(grep -c '"status":' "$T/out.json")" -eq 40 ] || fail "JSON has not 40 results"

mapfile -t expect < <(expectations "$T/c")
if ! "$ITEST_TOOL" check "$T/db" "$ARGS" "$T/c/ref.c" "${expect[@]}" \
    >"$T/check.txt"; then
    cat "$T/check.txt"
    # What the agents said about each mismatch.
    for f in $(awk '$1 == "BAD" {print $2}' "$T/check.txt"); do
        grep -F -A14 "\"file\":\"${f//\//\\/}\"" "$T/out.json" |
            grep -E '"(status|error|agent)"'
    done
    fail "store does not hold one right record per candidate"
fi
tail -1 "$T/check.txt"

# The same sources again: all skipped, nothing re-measured, no new record.
"$KILN" measure --args "$ARGS" --reference "$T/c/ref.c" --db "$T/db" \
    "${EVAL[@]}" "${files[@]}" >"$T/again.txt" 2>"$T/again.log" ||
    fail "second run exited $?"
[ "$(grep -c SKIPPED "$T/again.txt")" -eq 40 ] || fail "second run re-measured"
"$ITEST_TOOL" check "$T/db" "$ARGS" "$T/c/ref.c" "${expect[@]}" >/dev/null ||
    fail "second run changed the store"

# Measured and new sources mixed: the first is skipped, the two new ones
# (a wrong result, then a correct one) are measured, and each result is
# printed and recorded under its own source, not its neighbour's.
mkdir -p "$T/m"
sed 's/variant 0 /variant 0, again /' "${files[0]}" >"$T/m/ok_again.c"
{ cat "${files[39]}"; echo "/* again */"; } >"$T/m/wrong_again.c"
grep -q WRONG_RESULT <<<"$(grep -F "${files[39]}=" "$T/c/expect")" ||
    fail "the last candidate is not a wrong one"
"$KILN" measure --args "$ARGS" --reference "$T/c/ref.c" --db "$T/db" \
    "${EVAL[@]}" --json "${files[0]}" "$T/m/wrong_again.c" "$T/m/ok_again.c" \
    >"$T/mixed.json" 2>"$T/mixed.log" || fail "mixed run exited $?"
for f in ok_again wrong_again; do
    p="$T/m/$f.c"
    st=$(grep -F -A3 "\"file\":\"${p//\//\\/}\"" "$T/mixed.json" |
        sed -n 's/.*"status":"\([A-Z_]*\)".*/\1/p' | head -1)
    want=OK; [ $f = wrong_again ] && want=WRONG_RESULT
    [ "$st" = "$want" ] || fail "$f.c printed as '$st', not $want"
done
"$ITEST_TOOL" check "$T/db" "$ARGS" "$T/c/ref.c" "${expect[@]}" \
    "$T/m/ok_again.c=OK" "$T/m/wrong_again.c=WRONG_RESULT" >"$T/mixed.txt" ||
    { cat "$T/mixed.txt"; fail "mixed run recorded a result under another source"; }
echo PASS
