#!/usr/bin/env bash
# Builds kiln (plain and with ASan/UBSan), runs the whole test suite in both
# builds, checks formatting, and prints "N passed, N failed, N skipped"
# last. A cmocka test binary counts per test case (a case that calls skip()
# is skipped, never passed), any other test once (exit 77: skipped), the
# format check once; tools/test_count.py says how.
# Usage: tools/test.sh            (what .ci/run calls)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

bash tools/setup.sh build || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }
bash tools/setup.sh build-san -Db_sanitize=address,undefined \
    -Db_lundef=false -Dbuildtype=debug ||
    { echo "0 passed, 1 failed, 0 skipped"; exit 1; }

passed=0
failed=0
skipped=0
count() { # BUILD_DIR: adds the results of its last meson test run
    local p f s
    if [ -f "$1/meson-logs/testlog.json" ] &&
        read -r p f s < <(python3 tools/test_count.py "$1") &&
        [ -n "$s" ]; then
        passed=$((passed + p))
        failed=$((failed + f))
        skipped=$((skipped + s))
    else
        echo "count: no test results in $1" >&2
        failed=$((failed + 1))
    fi
}

# A run that does not start (e.g. a build error) must not count the
# results of an earlier one.
rm -f build/meson-logs/testlog.json build-san/meson-logs/testlog.json

echo "== tests (plain build)"
meson test -C build --print-errorlogs --num-processes 2
count build

echo "== tests (ASan/UBSan build)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C build-san --print-errorlogs --num-processes 2 \
    --no-suite slow
count build-san

# One check, always counted: without clang-format (tools/setup.sh installs
# it) the format is unchecked, which fails.
echo "== format"
if ! command -v clang-format >/dev/null; then
    echo "format: FAIL (clang-format not installed; tools/setup.sh installs it)"
    failed=$((failed + 1))
else
    files=$(git ls-files '*.c' '*.h')
    if clang-format --dry-run -Werror $files >/tmp/kiln-format.log 2>&1; then
        passed=$((passed + 1))
    else
        head -40 /tmp/kiln-format.log
        echo "format: FAIL (run clang-format -i on the files above)"
        failed=$((failed + 1))
    fi
fi

echo "${passed} passed, ${failed} failed, ${skipped} skipped"
[ "$failed" -eq 0 ]
