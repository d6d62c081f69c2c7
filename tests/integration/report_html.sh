#!/usr/bin/env bash
# kiln report on the records of a real tuning run: the page is well-formed
# (XML, and HTML apart from SVG's own tags), holds one SVG per task plus
# the weighted-latency one, needs no network, counts only the records of
# this machine's exact target; --svg writes the same plots as files, each
# a well-formed SVG; usage and missing-record exit codes.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/report_lib.sh"
command -v xmllint >/dev/null || { echo "SKIP: xmllint (libxml2-utils) missing"; exit 77; }
report_make_store

"$KILN" report --db "$T/db" --model "$T/tiny.graph" --html "$T/r.html" \
    --svg "$T/svg" 2>"$T/report.log" || fail "kiln report exited $?"
grep -q "3 task(s) on $EXACT" "$T/report.log" || fail "no summary line"

xmllint --noout "$T/r.html" 2>"$T/xml.log" || fail "page is not well-formed XML"
xmllint --html --noout "$T/r.html" 2>"$T/html.log"
# libxml2's HTML parser knows no SVG element: those are the only errors
# allowed.
if grep "error" "$T/html.log" |
    grep -v -E "Tag (svg|g|rect|line|polyline|circle|text) invalid" | grep -q .; then
    fail "HTML parser errors besides SVG tags: $(head -5 "$T/html.log")"
fi
count() { xmllint --xpath "$1" "$T/r.html" 2>/dev/null; }
[ "$(count 'count(//*[local-name()="svg"])')" = 4 ] || fail "expected 4 SVGs"
for i in 0 1 2; do
    [ "$(count "count(//*[local-name()=\"svg\" and @id=\"task-$i\"])")" = 1 ] ||
        fail "no SVG for task $i"
done
[ "$(count 'count(//*[local-name()="svg" and @id="weighted"])')" = 1 ] ||
    fail "no weighted-latency SVG"
[ "$(count 'count(//*[local-name()="polyline"])')" -ge 7 ] ||
    fail "fewer curves than expected"
grep -q "when every task has a valid record" "$T/r.html" ||
    fail "the weighted curve does not say where it starts"
# Self-contained: no script, no external resource.
grep -q -i -E "<script|<link|<img|@import|src=" "$T/r.html" &&
    fail "page loads something"
grep -o -E "https?://[^\"]*" "$T/r.html" | grep -v -x "http://www.w3.org/2000/svg" |
    grep -q . && fail "page names a URL other than the SVG namespace"
# Only this target's records: the Total row counts 12 trials, not 24.
grep -q "<td class=\"l\">Total</td><td></td><td></td><td>12</td>" "$T/r.html" ||
    fail "total trials is not 12 (other targets' records used?)"

ls "$T/svg" | sort | tr '\n' ' ' | grep -q "^task-0.svg task-1.svg task-2.svg weighted.svg $" ||
    fail "--svg did not write the 4 plots: $(ls "$T/svg")"
for f in "$T"/svg/*.svg; do
    xmllint --noout "$f" || fail "$f is not well-formed"
    [ "$(xmllint --xpath 'count(/*[local-name()="svg"])' "$f")" = 1 ] ||
        fail "$f has no svg root"
done

# Without --model: every workload with records on the target, weight 1.
"$KILN" report --db "$T/db" --target "$EXACT" --html "$T/all.html" \
    2>"$T/all.log" || fail "report without a model exited $?"
grep -q "sum of best latencies (weight 1)" "$T/all.html" || fail "no unweighted title"
# The other target on its own.
"$KILN" report --db "$T/db" --target cuda/sm_90 --html "$T/cuda.html" \
    2>"$T/cuda.log" || fail "report on cuda/sm_90 exited $?"
grep -q "on cuda/sm_90" "$T/cuda.html" || fail "cuda report mislabelled"

"$KILN" report --html "$T/x.html" 2>"$T/usage.log"
[ $? -eq 2 ] || fail "no --db: expected exit 2"
"$KILN" report --db "$T/db" --target cuda/sm_80 --html "$T/x.html" 2>"$T/none.log"
[ $? -eq 3 ] || fail "a target without records: expected exit 3"
grep -q "no record on target cuda/sm_80" "$T/none.log" || fail "no clear message"
"$KILN" report --db "$T/nonexistent" --html "$T/x.html" 2>"$T/nodb.log"
[ $? -eq 1 ] || fail "missing store: expected exit 1"
echo "PASS: page with 4 SVGs, 12 records of $EXACT"
