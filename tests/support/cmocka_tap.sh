#!/usr/bin/env bash
# Runs a cmocka test binary (the arguments: the program and its arguments)
# with TAP output, for meson's 'tap' protocol, so that every test case is
# counted on its own: passed, failed, or skipped by skip(). On its own, a
# cmocka binary exits 0 when some of its cases skipped, and meson would
# count the whole binary as passed.
#
# What this changes in cmocka's TAP (CMOCKA_MESSAGE_OUTPUT=TAP):
#  - cmocka 1.1 writes a skipped case as "not ok N # SKIP name", which TAP
#    (and meson) reads as a failure: it becomes "ok N - name # SKIP".
#  - Lines that are not TAP (what the tests print themselves, e.g. why a
#    case skips) become "# " comments instead of TAP parse warnings.
#  - A binary that exits 77 before running any case (nothing to test on
#    this machine) becomes the plan "1..0 # SKIP", one skipped test.
# Any other exit status goes to meson as it is: nonzero is an error, so a
# crash after some cases passed still fails. So are a binary that printed
# no TAP plan (it did not run its cases through cmocka) and one that exits
# 77 after running cases (a skip belongs to the cases, not to the binary).
export CMOCKA_MESSAGE_OUTPUT=TAP
"$@" | awk '
    /^1\.\.[0-9]+/ { plan = 1; print; fflush(); next }
    /^(not )?ok( |$)/ {
        if ($0 ~ /^not ok [0-9]+ # SKIP/) {
            n = $3
            name = $0
            sub(/^not ok [0-9]+ # SKIP */, "", name)
            print "ok " n " - " name " # SKIP"
        } else {
            print
        }
        fflush()
        next
    }
    /^#/ || /^Bail out!/ || /^$/ { print; fflush(); next }
    { print "# " $0; fflush() }
    END { if (!plan) { print "1..0 # SKIP no test case ran"; exit 3 } }'
st=("${PIPESTATUS[@]}")
rc=${st[0]} planless=$((st[1] == 3))
if [ "$rc" -eq 77 ] && [ $planless -eq 1 ]; then
    exit 0
elif [ "$rc" -eq 77 ]; then
    echo "cmocka_tap: $1 exited 77 after running test cases" >&2
elif [ "$rc" -eq 0 ] && [ $planless -eq 1 ]; then
    echo "cmocka_tap: $1 printed no TAP plan" >&2
    exit 1
fi
exit "$rc"
