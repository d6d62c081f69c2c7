#!/usr/bin/env bash
# kiln tune --model --condition auto and kiln export --condition auto
# (kl_model.h, "the measurement condition of each task"), real agent: a
# graph of a 1 MiB dense layer and a 16 KiB one. The large one is measured
# cold and the small one warm (the store's rows say so); the export picks
# each task's own condition and its library runs; a warm export names the
# task that has only cold records; a second run restores both tasks;
# the combinations that cannot mean anything are usage errors.
. "$(dirname "$0")/lib.sh"
TEVAL=(--repeat 3 --min-repeat-ms 1 --timeout-ms 5000)

cat >"$T/split.graph" <<'G'
model split
input x 1x1024
d = dense x O=256 bias=1
r = relu d
e = dense r O=16 bias=1
G

"$KILN" tune --model "$T/split.graph" --condition auto --max-trials-per-task 2 \
    --trials-per-iter 2 --db "$T/db" --strategy replay --quiet "${TEVAL[@]}" \
    >"$T/out1.txt" 2>"$T/tune1.log" || fail "kiln tune --condition auto exited $?"
grep -q "condition auto: 1 of 2 tasks measured cold (parameters of 1 MiB or more): dense_1_1024_256_bias[a-z_]* (1.0 MiB)" \
    "$T/tune1.log" || fail "no line naming the cold task"
grep -q "^Total trials: 4$" "$T/out1.txt" || fail "summary total is not 4"
"$KILN" db ls --db "$T/db" >"$T/ls.txt" || fail "kiln db ls"
grep -q "dense_1_1024_256.* cold  *2  *2 " "$T/ls.txt" ||
    fail "the 1 MiB task has no 2 valid cold records: $(cat "$T/ls.txt")"
grep -q "dense_1_256_16.* warm  *2  *2 " "$T/ls.txt" ||
    fail "the 16 KiB task has no 2 valid warm records: $(cat "$T/ls.txt")"
[ "$(grep -c " cold \| warm " "$T/ls.txt")" -eq 2 ] ||
    fail "a task measured in both conditions: $(cat "$T/ls.txt")"

# Resumed with the same condition: both tasks restore their records.
"$KILN" tune --model "$T/split.graph" --condition auto --max-trials-per-task 3 \
    --trials-per-iter 2 --db "$T/db" --strategy replay --quiet "${TEVAL[@]}" \
    >"$T/out2.txt" 2>"$T/tune2.log" || fail "resumed run exited $?"
grep -q "4 trials already in the store" "$T/tune2.log" ||
    fail "the resumed run did not restore 4 trials"
grep -q "^Total trials: 6$" "$T/out2.txt" || fail "resumed total is not 6"

"$KILN" export --db "$T/db" --model "$T/split.graph" --condition auto \
    --out "$T/lib" >"$T/exp.txt" 2>"$T/exp.log" || fail "export --condition auto exited $?"
grep -q "2 tuned, 0 naive.*(tuned tasks, auto: 1 cold, 1 warm)" "$T/exp.txt" ||
    fail "export line: $(cat "$T/exp.txt")"
python3 - "$T/lib/manifest.json" <<'PY' || fail "manifest conditions"
import json, sys
m = json.load(open(sys.argv[1]))
conds = {t["record"]["condition"] for t in m["tasks"]}
assert conds == {"cold", "warm"}, conds
for t in m["tasks"]:
    big = "dense_1_1024_256" in t["name"]
    assert t["record"]["condition"] == ("cold" if big else "warm"), t
PY
"$KILN" run --lib "$T/lib/libkiln_model.so" --model "$T/split.graph" --repeat 2 \
    >"$T/run.txt" 2>"$T/run.log" || fail "kiln run of the auto library exited $?"

# A warm export: the 1 MiB task has only cold records, named loudly.
"$KILN" export --db "$T/db" --model "$T/split.graph" --out "$T/warm" \
    >/dev/null 2>"$T/warm.log"
[ $? -eq 3 ] || fail "a warm export of cold-only records does not exit 3"
grep -q "dense_1_1024_256.*cold" "$T/warm.log" ||
    fail "the warm export does not name the cold task: $(cat "$T/warm.log")"
[ ! -e "$T/warm/libkiln_model.so" ] || fail "a failed export wrote a library"

# Usage errors, each naming what is wrong (exit 2).
usage() { # NAME EXPECTED-TEXT ARGS...
    local name=$1 want=$2
    shift 2
    "$KILN" "$@" >/dev/null 2>"$T/u.log"
    [ $? -eq 2 ] || fail "$name does not exit 2"
    grep -q -- "$want" "$T/u.log" || fail "$name: $(head -2 "$T/u.log")"
}
usage "tune --condition hot" "condition 'hot': expected warm, cold or auto" \
    tune --model "$T/split.graph" --condition hot
usage "tune --op --condition auto" "--condition auto goes with --model" \
    tune --op "matmul M=8 N=8 K=8" --condition auto
usage "tune --condition cold --no-flush" "excludes --no-flush" \
    tune --model "$T/split.graph" --condition cold --no-flush
usage "tune --condition auto --min-repeat-ms 0" "measures cold" \
    tune --model "$T/split.graph" --condition auto --min-repeat-ms 0
usage "export --op --condition auto" "--condition auto goes with --model" \
    export --db "$T/db" --op "matmul M=8 N=8 K=8" --condition auto --out "$T/x"
usage "export --condition hot" "condition 'hot'" \
    export --db "$T/db" --model "$T/split.graph" --condition hot --out "$T/x"
echo PASS
