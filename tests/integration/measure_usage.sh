#!/usr/bin/env bash
# kiln measure refuses bad input with exit 2 and a message naming the
# problem, before starting anything.
. "$(dirname "$0")/lib.sh"
make_candidates "$T/c"
ok="$T/c/ok_ijk_0.c"
expect_usage() { # WANT_TEXT ARGS...
    local want=$1; shift
    "$KILN" measure "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    [ "$rc" -eq 2 ] || fail "exit $rc (want 2) for: $*"
    grep -qF -- "$want" "$T/err" || { cat "$T/err"; fail "no '$want' for: $*"; }
}
expect_usage "'B:f32[256,x]'" --args "A:f32[256,256] B:f32[256,x] C:f32[4]:out" \
    --reference "$T/c/ref.c" "$ok"
expect_usage "'q64'" --args "A:q64[4] C:f32[4]:out" --reference "$T/c/ref.c" "$ok"
expect_usage "exactly one" --args "A:f32[4] C:f32[4]" --reference "$T/c/ref.c" "$ok"
expect_usage "named twice" --args "A:f32[4] A:f32[4]:out" --reference "$T/c/ref.c" "$ok"
expect_usage "--reference" --args "$ARGS" "$ok"
expect_usage "candidate files" --args "$ARGS" --reference "$T/c/ref.c"
expect_usage "$T/nope.c" --args "$ARGS" --reference "$T/c/ref.c" "$T/nope.c"
expect_usage "--repeat" --args "$ARGS" --reference "$T/c/ref.c" --repeat 0 "$ok"
expect_usage "needs --keys" --listen 'tcp://127.0.0.1:*' --args "$ARGS" \
    --reference "$T/c/ref.c" "$ok"
expect_usage "loopback only" --listen 'tcp://0.0.0.0:*' --insecure \
    --args "$ARGS" --reference "$T/c/ref.c" "$ok"
echo PASS
