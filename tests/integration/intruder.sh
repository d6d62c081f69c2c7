#!/usr/bin/env bash
# An agent whose key is not on the coordinator's allow-list gets no work:
# (1) alone, the job waits for an agent, then fails with a clear message;
# (2) next to an allowed agent, the allowed one measures everything.
. "$(dirname "$0")/lib.sh"
make_candidates "$T/c"
mapfile -t files < <(cand_files "$T/c" | grep -E 'ok_|wrong_' | head -8)
keys good
"$KILN" keygen "$T/evil" evil >/dev/null || fail "keygen evil"

# (1) only the intruder
start_listen "$T/out1.txt" "$T/measure1.log" --keys "$T/keys" \
    --args "$ARGS" --reference "$T/c/ref.c" --db "$T/db1" --agent-wait-s 4 \
    "${EVAL[@]}" "${files[@]}"
start_agent evil
wait "$MEASURE_PID"
rc=$?
[ "$rc" -eq 1 ] || fail "with only an intruder kiln measure exited $rc, want 1"
grep -q "no agent for target 'cpu'" "$T/measure1.log" || fail "no clear message"
grep "no agent" "$T/measure1.log"
kill -TERM "$AGENT_PID"

# (2) the intruder and an allowed agent
start_listen "$T/out2.txt" "$T/measure2.log" --keys "$T/keys" \
    --args "$ARGS" --reference "$T/c/ref.c" --db "$T/db2" \
    "${EVAL[@]}" "${files[@]}"
start_agent evil
start_agent good
wait "$MEASURE_PID"
rc=$?
[ "$rc" -eq 0 ] || fail "kiln measure exited $rc"
expect=()
for f in "${files[@]}"; do
    case $f in *ok_*) expect+=("$f=OK") ;; *) expect+=("$f=WRONG_RESULT") ;; esac
done
"$ITEST_TOOL" check "$T/db2" "$ARGS" "$T/c/ref.c" --not-agent evil \
    "${expect[@]}" || fail "records wrong or made by the intruder"
grep -q "evil" "$T/measure2.log" && fail "the coordinator registered the intruder"
echo PASS
