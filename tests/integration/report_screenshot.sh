#!/usr/bin/env bash
# A headless Chromium screenshot of kiln report's page is not blank: the
# PNG has many colours and the plots' blue. The checker is first shown an
# all-white page and must call it blank. Without a runnable chromium this
# test says SKIP (77); the page's own checks are in report_html.sh.
. "$(dirname "$0")/lib.sh"
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROMIUM" ] || { echo "SKIP: chromium not installed"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 missing"; exit 77; }
. "$(dirname "$0")/report_lib.sh"

shot() { # HTML PNG
    HOME="$T" timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu \
        --user-data-dir="$T/chrome" --screenshot="$2" --window-size=1200,2000 \
        "file://$1" >>"$T/chromium.log" 2>&1 && [ -s "$2" ]
}
echo '<!DOCTYPE html><html><body style="background:#fff"></body></html>' >"$T/white.html"
shot "$T/white.html" "$T/white.png" ||
    { echo "SKIP: chromium cannot run here: $(tail -2 "$T/chromium.log")"; exit 77; }
PNGCHECK="$(dirname "$0")/report_png.py"
python3 "$PNGCHECK" "$T/white.png" >"$T/white.txt" 2>&1 &&
    fail "the checker calls an all-white page non-blank: $(cat "$T/white.txt")"

report_make_store
"$KILN" report --db "$T/db" --model "$T/tiny.graph" --html "$T/r.html" \
    2>"$T/report.log" || fail "kiln report exited $?"
shot "$T/r.html" "$T/r.png" || fail "chromium failed on the report"
python3 "$PNGCHECK" "$T/r.png" >"$T/r.txt" 2>&1 || fail "blank screenshot: $(cat "$T/r.txt")"
echo "PASS: screenshot $(cat "$T/r.txt")"
