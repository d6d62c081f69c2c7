# Shared by report_html.sh and report_screenshot.sh: a real `kiln tune
# --model` run of a three-task graph on a local agent (12 trials), and
# the store $T/db holding its records on this machine's exact CPU target
# $EXACT, plus copies of them on another target (cuda/sm_90) that a
# report on $EXACT must never use. Needs lib.sh sourced first.
EXACT=cpu/x86_64
if grep -qw avx512f /proc/cpuinfo; then
    EXACT=cpu/x86_64-avx512
elif grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
    EXACT=cpu/x86_64-avx2
fi

cat >"$T/tiny.graph" <<'G'
model tiny
input x 1x8x16x16
c = conv2d x K=8 R=3 pad=1 bias=1
r = relu c
p = max_pool2d r R=2
f = flatten p
d = dense f O=32
G

report_make_store() {
    "$KILN" tune --model "$T/tiny.graph" --max-trials-global 12 \
        --trials-per-iter 4 --db "$T/tuned" --seed 1 --strategy replay \
        --repeat 3 --min-repeat-ms 0 --timeout-ms 5000 --no-flush \
        >"$T/tune.out" 2>"$T/tune.log" || fail "kiln tune --model exited $?"
    "$KILN" db export --db "$T/tuned" --out "$T/tuned.jsonl" ||
        fail "kiln db export"
    # Records made before kiln tune recorded the agent's exact target say
    # "cpu": they were measured here, so they are this machine's.
    sed -e "s|\"target\":\"cpu\"|\"target\":\"$EXACT\"|" "$T/tuned.jsonl" \
        >"$T/exact.jsonl"
    grep '"type":"record"' "$T/exact.jsonl" |
        sed -e "s|\"target\":\"$EXACT\"|\"target\":\"cuda/sm_90\"|" \
            >"$T/other.jsonl"
    "$KILN" db import --db "$T/db" "$T/exact.jsonl" 2>>"$T/import.log" &&
        "$KILN" db import --db "$T/db" "$T/other.jsonl" 2>>"$T/import.log" ||
        fail "kiln db import"
    NREC=$(grep -c "\"target\":\"$EXACT\"" "$T/exact.jsonl")
    [ "$NREC" -eq 12 ] || fail "expected 12 records on $EXACT, got $NREC"
}
