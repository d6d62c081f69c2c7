#!/usr/bin/env bash
# The candidate sandbox needs no root: as root, runner_test (hostile
# candidates against the runner and kiln-runner's sandbox) runs again as
# uid 65534 with no groups and no capabilities, and passes. Not root: the
# unit run already was unprivileged (exit 77). A build tree uid 65534
# cannot read is skipped too.
set -u
[ "$(id -u)" -eq 0 ] || { echo "SKIP: not root: runner_test already ran unprivileged"; exit 77; }
command -v setpriv >/dev/null || { echo "SKIP: no setpriv"; exit 77; }
[ -x "$RUNNER_TEST" ] && [ -x "$KILN_RUNNER" ] || { echo "FAIL: RUNNER_TEST / KILN_RUNNER not set"; exit 1; }
if ! setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$RUNNER_TEST" -a -r "$KILN_RUNNER"; then
    echo "SKIP: uid 65534 cannot reach the build tree ($RUNNER_TEST)"
    exit 77
fi
T=$(mktemp -d /tmp/kiln-unpriv-XXXXXX)
chmod 0777 "$T"
trap 'rm -rf "$T"' EXIT
out=$(cd "$T" && setpriv --reuid=65534 --regid=65534 --clear-groups \
    --inh-caps=-all --bounding-set=-all \
    env -i PATH=/usr/bin:/bin HOME="$T" TMPDIR="$T" KILN_RUNNER="$KILN_RUNNER" \
    timeout 300 "$RUNNER_TEST" 2>&1)
rc=$?
echo "$out" | tail -15
[ "$rc" -eq 0 ] || { echo "FAIL: runner_test as uid 65534 exited $rc"; exit 1; }
echo "$out" | grep -q "SKIPPED" && { echo "FAIL: as uid 65534 the sandbox cases skipped (no sandbox without root?)"; exit 1; }
echo PASS
