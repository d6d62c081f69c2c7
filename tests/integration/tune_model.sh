#!/usr/bin/env bash
# kiln extract and kiln tune --model on a local fleet (one real kiln-agent,
# real compiles and timings). A three-task graph file is tuned with a
# global cap of 8 trials in batches of 4: the third task may get none (and
# the run says so at start), the store holds exactly 8 records, the
# summary says 8, the JSON summary agrees. A second run on the same store
# with a cap of 12 restores the 8 and adds exactly 4. A per-task cap of 2
# with 3 tasks ends the job at 6 on a fresh store.
. "$(dirname "$0")/lib.sh"
TEVAL=(--repeat 3 --min-repeat-ms 0 --timeout-ms 5000 --no-flush)

# kiln extract: ResNet-18's tasks and kiln's FLOP count (tests/unit/
# models_test.c derives both from the architecture).
"$KILN" extract --model resnet18 >"$T/extract.txt" 2>"$T/extract.log" ||
    fail "kiln extract exited $?"
grep -q "^Total: 18 tasks, 23 layer kernels .* 3368137768 FLOP" "$T/extract.txt" ||
    fail "resnet18: unexpected totals: $(tail -1 "$T/extract.txt")"
"$KILN" extract --model no_such_model >/dev/null 2>"$T/nomodel.log"
[ $? -eq 2 ] || fail "an unknown model does not exit 2"
grep -q "resnet18" "$T/nomodel.log" || fail "the error does not list the built-ins"

cat >"$T/tiny.graph" <<'G'
model tiny
input x 1x8x16x16
c = conv2d x K=8 R=3 pad=1 bias=1
r = relu c
p = max_pool2d r R=2
f = flatten p
d = dense f O=32
G
"$KILN" extract --model "$T/tiny.graph" >"$T/tiny.txt" || fail "extract tiny"
grep -q "^Total: 3 tasks" "$T/tiny.txt" || fail "tiny: not 3 tasks"

# records DB: the sum of the RECORDS column of kiln db ls.
records() {
    "$KILN" db ls --db "$1" | awk 'NR > 1 { n += $(NF - 3) } END { print n + 0 }'
}

"$KILN" tune --model "$T/tiny.graph" --max-trials-global 8 \
    --trials-per-iter 4 --db "$T/db" --seed 1 --strategy replay \
    --summary-json "$T/sum.json" "${TEVAL[@]}" \
    >"$T/out1.txt" 2>"$T/tune1.log" || fail "kiln tune --model exited $?"
grep -q "^Total trials: 8$" "$T/out1.txt" || fail "summary total is not 8"
grep -q "kiln tune: round 1: task 0" "$T/tune1.log" || fail "no round line"
grep -q "1 task may get no trial at all: 2 (dense_1_512_32_bias)" "$T/tune1.log" ||
    fail "no warning about the task the global cap leaves out"
grep -q "Weighted Latency (us)" "$T/tune1.log" || fail "no table after a round"
n=$(records "$T/db")
[ "$n" -eq 8 ] || fail "store holds $n records, expected 8"
grep -q '"total_trials":8,' "$T/sum.json" || fail "JSON summary total is not 8"

"$KILN" tune --model "$T/tiny.graph" --max-trials-global 12 \
    --trials-per-iter 4 --db "$T/db" --seed 2 --strategy replay --quiet \
    "${TEVAL[@]}" >"$T/out2.txt" 2>"$T/tune2.log" || fail "resumed run exited $?"
grep -q "8 trials already in the store" "$T/tune2.log" || fail "nothing restored"
grep -q "^Total trials: 12$" "$T/out2.txt" || fail "resumed total is not 12"
n=$(records "$T/db")
[ "$n" -eq 12 ] || fail "store holds $n records after the resume, expected 12"

"$KILN" tune --model "$T/tiny.graph" --max-trials-per-task 2 \
    --trials-per-iter 3 --db "$T/db2" --strategy replay --quiet \
    --scheduler round-robin "${TEVAL[@]}" >"$T/out3.txt" 2>"$T/tune3.log" ||
    fail "per-task run exited $?"
grep -q "^Total trials: 6$" "$T/out3.txt" || fail "per-task caps do not add to 6"
[ "$(records "$T/db2")" -eq 6 ] || fail "store 2 does not hold 6 records"
"$KILN" tune --model "$T/tiny.graph" --scheduler fastest \
    >/dev/null 2>"$T/usage.log"
[ $? -eq 2 ] || fail "an unknown scheduler does not exit 2"
echo PASS
