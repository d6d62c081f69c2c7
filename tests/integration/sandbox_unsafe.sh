#!/usr/bin/env bash
# kiln-agent --unsafe-no-sandbox says so everywhere: the head's log warns,
# `kiln fleet status` marks the agent UNSANDBOXED (JSON "unsandboxed":
# true), and the candidate it measured is "unsandboxed" in kiln measure's
# JSON and in the store's record (kiln db best). And an agent that cannot
# make a sandbox (KILN_BWRAP pointing nowhere) refuses to start, naming
# the flag.
. "$(dirname "$0")/lib.sh"
K="$T/keys"
"$KILN" keygen "$K" coordinator >/dev/null || fail "keygen coordinator"
"$KILN" keygen "$K" a0 --agent-key >/dev/null || fail "keygen a0"
"$KILN" keygen "$K" ops --operator >/dev/null || fail "keygen ops"
"$KILN" keygen "$K" client --client >/dev/null || fail "keygen client"

# No sandbox to be had: refused, exit 1, naming the flag.
KILN_BWRAP=/nonexistent/bwrap "$KILN_AGENT" --connect tcp://127.0.0.1:9 \
    --keys "$K" --name a0 --coordinator-key "$K/coordinator.pub" \
    >"$T/refuse.out" 2>"$T/refuse.log"
rc=$?
[ "$rc" -eq 1 ] || fail "an agent without a sandbox exited $rc, not 1"
grep -q "cannot sandbox candidates" "$T/refuse.log" &&
    grep -q -- "--unsafe-no-sandbox" "$T/refuse.log" ||
    fail "the refusal does not say why and how: $(cat "$T/refuse.log")"

KILN_LOG=info "$KILN" serve --agents 'tcp://127.0.0.1:*' \
    --clients 'tcp://127.0.0.1:*' --keys "$K" 2>"$T/serve.log" &
PIDS+=("$!")
wait_for 10 grep -q "jobs on" "$T/serve.log" || fail "kiln serve did not bind"
AEP=$(sed -n 's/.*agents on \(tcp:[^,]*\), jobs on \(tcp:.*\)$/\1/p' "$T/serve.log")
CEP=$(sed -n 's/.*agents on \(tcp:[^,]*\), jobs on \(tcp:.*\)$/\2/p' "$T/serve.log")
KILN_BWRAP=/nonexistent/bwrap "$KILN_AGENT" --connect "$AEP" --keys "$K" \
    --name a0 --coordinator-key "$K/coordinator.pub" --unsafe-no-sandbox \
    2>"$T/agent.log" &
PIDS+=("$!")
wait_for 20 grep -q "WITHOUT its sandbox" "$T/serve.log" ||
    fail "the head did not warn of the unsandboxed agent"
"$KILN" fleet status --head "$CEP" --keys "$K" --key ops >"$T/status.txt" 2>&1 ||
    fail "kiln fleet status: $(cat "$T/status.txt")"
grep -q "a0 .*UNSANDBOXED" "$T/status.txt" || fail "status does not mark a0: $(cat "$T/status.txt")"
"$KILN" fleet status --head "$CEP" --keys "$K" --key ops --json >"$T/status.json" 2>&1
grep -q '"unsandboxed":true' "$T/status.json" || fail "status JSON: $(cat "$T/status.json")"

make_candidates "$T/c"
f="$T/honest.c"
sed "s/^void kernel/void kernel/" "$T/c/ref.c" >"$f"
"$KILN" measure --args "$ARGS" --reference "$T/c/ref.c" --fleet "$CEP" \
    --keys "$K" --db "$T/db" "${EVAL[@]}" --json "$f" >"$T/out.json" \
    2>"$T/measure.log" || fail "kiln measure exited $?: $(cat "$T/measure.log")"
grep -q '"unsandboxed":true' "$T/out.json" || fail "the result is not marked: $(cat "$T/out.json")"
"$KILN" db export --db "$T/db" --out "$T/records.jsonl" 2>"$T/export.log" ||
    fail "kiln db export: $(cat "$T/export.log")"
grep -q '"unsandboxed": *true' "$T/records.jsonl" ||
    fail "the stored record is not marked: $(head -c 600 "$T/records.jsonl")"
echo PASS
