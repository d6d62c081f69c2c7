#!/usr/bin/env python3
"""Counts the results of the last `meson test` run in a build directory and
prints "PASSED FAILED SKIPPED" (tools/test.sh adds them up).

The unit is the test case where there are cases, the test otherwise:
  - a TAP test (the cmocka binaries, registered with protocol 'tap' through
    tests/support/cmocka_tap.sh) counts each of its TAP lines: "ok" passed,
    "ok ... # SKIP" skipped, "not ok" failed. A test that meson marks as
    failed (a crash, a timeout, a nonzero exit, a TAP error) while none of
    its lines failed adds one failure, so that what went wrong after its
    last case is not lost. A TAP test without any case ("1..0 # SKIP")
    counts as one skipped test.
  - any other test (shell scripts, fuzz replays, GPU checks) counts once,
    by meson's result: OK (or the expected failure of a should_fail test)
    passed, SKIP (exit 77) skipped, anything else failed.

meson (up to 1.x) writes no TAP subtests into testlog.json, so the TAP
lines are read back from each test's stdout there, and which tests are TAP
from meson-info/intro-tests.json.
Usage: tools/test_count.py BUILD_DIR
"""
import json
import os
import re
import sys

TAP_LINE = re.compile(r"(not )?ok\b(?:\s*\d+)?[^#]*(?:#\s*(\w+).*)?")
BAD = {"FAIL", "TIMEOUT", "ERROR", "UNEXPECTEDPASS", "INTERRUPT"}


def tap_counts(stdout):
    """(passed, failed, skipped) of the TAP test lines in stdout."""
    p = f = s = 0
    for line in stdout.splitlines():
        m = TAP_LINE.fullmatch(line.rstrip())
        if not m:
            continue
        directive = (m.group(2) or "").upper()
        if m.group(1):
            if directive == "TODO":
                s += 1  # an expected failure
            else:
                f += 1
        elif directive.startswith("SKIP"):
            s += 1
        elif directive == "TODO":
            f += 1  # an unexpected pass
        else:
            p += 1
    return p, f, s


def main():
    build = sys.argv[1]
    with open(os.path.join(build, "meson-info", "intro-tests.json")) as f:
        tap = {t["name"] for t in json.load(f) if t["protocol"] == "tap"}
    passed = failed = skipped = 0
    with open(os.path.join(build, "meson-logs", "testlog.json")) as f:
        for line in f:
            r = json.loads(line)
            # "project:suite / name"
            name = r["name"].rsplit(" / ", 1)[-1]
            result = r["result"]
            p = f_ = s = 0
            if name in tap:
                p, f_, s = tap_counts(r.get("stdout") or "")
            if p + f_ + s == 0:
                if result in ("OK", "EXPECTEDFAIL"):
                    p = 1
                elif result == "SKIP":
                    s = 1
                else:
                    f_ = 1
            elif result in BAD and f_ == 0:
                f_ = 1
            passed += p
            failed += f_
            skipped += s
    print(passed, failed, skipped)


if __name__ == "__main__":
    main()
