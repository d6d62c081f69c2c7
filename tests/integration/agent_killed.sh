#!/usr/bin/env bash
# Remote style: kiln measure --listen with CURVE keys, two kiln-agent
# processes started here; one is killed with SIGKILL after the first
# results. Its candidates are re-sent to the other: still exactly one
# record per candidate, with the right status. Then the survivor serves a
# second job on the same endpoint.
. "$(dirname "$0")/lib.sh"
make_candidates "$T/c"
mapfile -t files < <(cand_files "$T/c")
keys a1 a2
start_listen "$T/out.txt" "$T/measure.log" --keys "$T/keys" \
    --args "$ARGS" --reference "$T/c/ref.c" --db "$T/db" --heartbeat-ms 500 \
    "${EVAL[@]}" "${files[@]}"
start_agent a1
victim=$AGENT_PID
start_agent a2
# The first result row (after the header) is in: kill a1 mid-job.
wait_for 60 bash -c "[ \$(wc -l <'$T/out.txt') -ge 2 ]" || fail "no result in 60 s"
kill -KILL "$victim"
echo "killed agent a1 (pid $victim) after $(($(wc -l <"$T/out.txt") - 1)) result(s)"
wait "$MEASURE_PID"
rc=$?
[ "$rc" -eq 0 ] || fail "kiln measure exited $rc"
grep -q "agent a1 .* lost" "$T/measure.log" || fail "the coordinator did not see a1 go"
mapfile -t expect < <(expectations "$T/c")
"$ITEST_TOOL" check "$T/db" "$ARGS" "$T/c/ref.c" "${expect[@]}" | tail -3
"$ITEST_TOOL" check "$T/db" "$ARGS" "$T/c/ref.c" "${expect[@]}" >/dev/null ||
    fail "not one right record per candidate after losing an agent"

# Agents outlive jobs: a2 is still running and serves the next job bound
# on the same endpoint (it says Hello again after the coordinator's
# Goodbye).
survivor=$AGENT_PID
kill -0 "$survivor" 2>/dev/null || fail "agent a2 exited with the job"
port=${EP##*:}
"$KILN" measure --listen "tcp://127.0.0.1:$port" --keys "$T/keys" \
    --args "$ARGS" --reference "$T/c/ref.c" --db "$T/db2" --agent-wait-s 20 \
    "${EVAL[@]}" "$T/c/ok_kij_4.c" "$T/c/wrong_0.c" >"$T/out2.txt" \
    2>"$T/measure2.log" || fail "second job on the same endpoint exited $?"
"$ITEST_TOOL" check "$T/db2" "$ARGS" "$T/c/ref.c" "$T/c/ok_kij_4.c=OK" \
    "$T/c/wrong_0.c=WRONG_RESULT" || fail "second job's records"
echo PASS
