#!/usr/bin/env bash
# Builds kiln (plain and with ASan/UBSan), runs the whole test suite in both
# builds, checks formatting, and prints "N passed, N failed" last.
# Usage: tools/test.sh            (what .ci/run calls)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

bash tools/setup.sh build || { echo "0 passed, 1 failed"; exit 1; }
bash tools/setup.sh build-san -Db_sanitize=address,undefined \
    -Db_lundef=false -Dbuildtype=debug ||
    { echo "0 passed, 1 failed"; exit 1; }

passed=0
failed=0
skipped=0
count() { # BUILD_DIR: adds the results of its last meson test run
    local log="$1/meson-logs/testlog.json"
    [ -f "$log" ] || { failed=$((failed + 1)); return; }
    local p f s
    p=$(grep -c '"result": "OK"' "$log")
    f=$(grep -cE '"result": "(FAIL|TIMEOUT|ERROR|UNEXPECTEDPASS)"' "$log")
    s=$(grep -c '"result": "SKIP"' "$log")
    passed=$((passed + p))
    failed=$((failed + f))
    skipped=$((skipped + s))
}

echo "== tests (plain build)"
meson test -C build --print-errorlogs --num-processes 2
count build

echo "== tests (ASan/UBSan build)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C build-san --print-errorlogs --num-processes 2 \
    --no-suite slow
count build-san

echo "== format"
if command -v clang-format >/dev/null; then
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
