#!/usr/bin/env bash
# A Hello of protocol major 99 is refused with a Goodbye naming both
# versions, and the peer is not registered.
. "$(dirname "$0")/lib.sh"
make_candidates "$T/c"
start_listen "$T/out.txt" "$T/measure.log" --insecure --agent-wait-s 3 \
    --args "$ARGS" --reference "$T/c/ref.c" "$T/c/ok_ijk_0.c"
"$ITEST_TOOL" hello99 "$EP" || fail "no Goodbye naming both versions"
wait "$MEASURE_PID"
rc=$?
[ "$rc" -eq 1 ] || fail "kiln measure exited $rc; the old agent must not count"
grep -q "protocol version 99.7 refused" "$T/measure.log" || fail "not logged"
echo PASS
