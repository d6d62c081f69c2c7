#!/usr/bin/env bash
# kiln measure --fleet: hand-written candidates measured on a shared head
# node (kiln serve, CURVE on) by a real kiln-agent connected to it, while
# a tuning job shares the same head. Every candidate gets exactly one
# record with the right status in the measuring side's store; the head
# stores nothing; a second run measures nothing again; bad option mixes
# are refused with exit 2.
. "$(dirname "$0")/lib.sh"
make_candidates "$T/c"
mapfile -t files < <(cand_files "$T/c")
K="$T/keys"
"$KILN" keygen "$K" coordinator >/dev/null || fail "keygen coordinator"
"$KILN" keygen "$K" a0 --agent-key >/dev/null || fail "keygen a0"
"$KILN" keygen "$K" client --client >/dev/null || fail "keygen client"

KILN_LOG=info "$KILN" serve --agents 'tcp://127.0.0.1:*' \
    --clients 'tcp://127.0.0.1:*' --keys "$K" 2>"$T/serve.log" &
PIDS+=("$!")
wait_for 10 grep -q "jobs on" "$T/serve.log" || fail "kiln serve did not bind"
AEP=$(sed -n 's/.*agents on \(tcp:[^,]*\), jobs on \(tcp:.*\)$/\1/p' "$T/serve.log")
CEP=$(sed -n 's/.*agents on \(tcp:[^,]*\), jobs on \(tcp:.*\)$/\2/p' "$T/serve.log")
"$KILN_AGENT" --connect "$AEP" --keys "$K" --name a0 \
    --coordinator-key "$K/coordinator.pub" --build-slots 2 \
    2>"$T/agent.log" &
PIDS+=("$!")

# Usage errors: exit 2, nothing started.
"$KILN" measure --args "$ARGS" --reference "$T/c/ref.c" --fleet "$CEP" \
    --listen tcp://127.0.0.1:0 --insecure "${files[0]}" >/dev/null 2>"$T/u1.log"
[ $? -eq 2 ] && grep -q -- "--fleet excludes --listen" "$T/u1.log" ||
    fail "--fleet with --listen: $(cat "$T/u1.log")"
"$KILN" measure --args "$ARGS" --reference "$T/c/ref.c" --fleet "$CEP" \
    "${files[0]}" >/dev/null 2>"$T/u2.log"
[ $? -eq 2 ] && grep -q -- "--fleet needs --keys" "$T/u2.log" ||
    fail "--fleet without keys: $(cat "$T/u2.log")"

# A simulated tuning job shares the head meanwhile (no agent serves its
# sim target: it waits, and must not take the measuring job's agent).
"$KILN" tune --op "matmul M=64 N=64 K=64" --simulate --max-trials-per-task 8 \
    --db "$T/db-tune" --fleet "$CEP" --keys "$K" --name waiting \
    --agent-wait-s 60 >"$T/tune.out" 2>"$T/tune.log" &
TUNE=$!
PIDS+=("$TUNE")

"$KILN" measure --args "$ARGS" --reference "$T/c/ref.c" --fleet "$CEP" \
    --keys "$K" --db "$T/db" --flop 33554432 "${EVAL[@]}" --json \
    "${files[@]}" >"$T/out.json" 2>"$T/measure.log" ||
    fail "kiln measure --fleet exited $?"
grep -q "job measure-.* on head $CEP" "$T/measure.log" ||
    fail "no head line: $(cat "$T/measure.log")"
[ "$(grep -c '"status":' "$T/out.json")" -eq 40 ] || fail "JSON has not 40 results"
grep -q '"agent":"a0"\|"agent": "a0"' "$T/out.json" || fail "results not from a0"
mapfile -t expect < <(expectations "$T/c")
"$ITEST_TOOL" check "$T/db" "$ARGS" "$T/c/ref.c" "${expect[@]}" \
    >"$T/check.txt" || { cat "$T/check.txt"; fail "store does not hold one right record per candidate"; }
tail -1 "$T/check.txt"

# Again through the head: all skipped, nothing re-measured.
"$KILN" measure --args "$ARGS" --reference "$T/c/ref.c" --fleet "$CEP" \
    --keys "$K" --db "$T/db" "${EVAL[@]}" "${files[@]}" >"$T/again.txt" \
    2>"$T/again.log" || fail "second run exited $?"
[ "$(grep -c SKIPPED "$T/again.txt")" -eq 40 ] || fail "second run re-measured"
"$ITEST_TOOL" check "$T/db" "$ARGS" "$T/c/ref.c" "${expect[@]}" >/dev/null ||
    fail "second run changed the store"
kill -0 "$TUNE" 2>/dev/null || fail "the waiting job ended early: $(cat "$T/tune.log")"
echo PASS
