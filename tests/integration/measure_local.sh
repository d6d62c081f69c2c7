#!/usr/bin/env bash
# kiln measure with a local fleet of 2 agents (ephemeral CURVE keys) on 40
# candidates of a 256x256 matmul: compile errors, segfaults, endless
# loops, wrong outputs and correct loop orders. Every candidate gets
# exactly one record with the right status; a second run measures nothing
# again.
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
echo PASS
