#!/usr/bin/env bash
# A Hello of protocol major 99 is refused with a Goodbye naming both
# versions, and the peer is not registered; so is a Hello of 1.0, an agent
# that would drop requests with constant inputs (ROLE_CONSTANT).
. "$(dirname "$0")/lib.sh"
make_candidates "$T/c"
start_listen "$T/out.txt" "$T/measure.log" --insecure --agent-wait-s 3 \
    --args "$ARGS" --reference "$T/c/ref.c" "$T/c/ok_ijk_0.c"
"$ITEST_TOOL" hello99 "$EP" || fail "no Goodbye naming both versions"
"$ITEST_TOOL" hello "$EP" 1.0 "needs 1.1 or later" ||
    fail "a 1.0 agent was not told it is too old"
wait "$MEASURE_PID"
rc=$?
[ "$rc" -eq 1 ] || fail "kiln measure exited $rc; the old agent must not count"
grep -q "protocol version 99.7 refused" "$T/measure.log" || fail "not logged"
grep -q "agent protocol 1.0 refused" "$T/measure.log" || fail "1.0 not logged"
echo PASS
