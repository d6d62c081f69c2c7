#!/usr/bin/env bash
# A hard kill and a resume: kiln tune --model on the local fleet (a real
# kiln-agent, real compiles and timings) is SIGKILLed mid-job once the
# store holds some records, run again and SIGKILLed again past what it
# restored. Its local agent goes with it each time (it asked for SIGTERM on
# its parent's death). The same command on the same store then
# resumes: it says what it restored, ends with exactly its trial budget,
# every record committed before the kill is still there byte for byte
# (kiln db export before and after), and no (workload, trace) pair is
# measured twice.
. "$(dirname "$0")/lib.sh"
TEVAL=(--repeat 3 --min-repeat-ms 0 --timeout-ms 5000 --no-flush)
BUDGET=24

cat >"$T/tiny.graph" <<'G'
model tiny
input x 1x8x16x16
c = conv2d x K=8 R=3 pad=1 bias=1
r = relu c
p = max_pool2d r R=2
f = flatten p
d = dense f O=32
G
records() {
    "$KILN" db ls --db "$1" | awk 'NR > 1 { n += $(NF - 3) } END { print n + 0 }'
}
JOB=(tune --model "$T/tiny.graph" --max-trials-global "$BUDGET"
    --trials-per-iter 4 --db "$T/db" --seed 1 --strategy replay --quiet
    "${TEVAL[@]}") # the same both times

# kill_at RUN MIN: runs the job, SIGKILLs it once the store holds MIN
# records, checks its local agents go too and exports the store to
# $T/RUN.jsonl; sets KEPT to the records it holds.
kill_at() {
    local run=$1 min=$2 pid agents a
    "$KILN" "${JOB[@]}" >"$T/$run.out" 2>"$T/$run.log" &
    pid=$!
    PIDS+=("$pid")
    wait_for 120 bash -c "[ \$(\"$KILN\" db ls --db '$T/db' 2>/dev/null |
        awk 'NR > 1 { n += \$(NF - 3) } END { print n + 0 }') -ge $min ]" ||
        fail "$run: not $min records in the store after 120 s"
    agents=$(pgrep -P "$pid")
    [ -n "$agents" ] || fail "$run: kiln tune has no local agent"
    kill -KILL "$pid"
    wait "$pid" 2>/dev/null
    "$KILN" db export --db "$T/db" --out "$T/$run.jsonl" || fail "export after $run"
    KEPT=$(grep -c '"type":"record"' "$T/$run.jsonl")
    echo "$run: killed kiln tune (pid $pid) with $KEPT record(s) in the store"
    [ "$KEPT" -ge "$min" ] || fail "$run: $KEPT records after the kill"
    [ "$KEPT" -lt "$BUDGET" ] || fail "$run: the job was done before the kill"
    # Its local agent(s) follow it (SIGTERM on the parent's death).
    for a in $agents; do
        wait_for 10 bash -c "! kill -0 $a 2>/dev/null" ||
            { kill -KILL "$a"; fail "$run: agent $a outlived its killed kiln"; }
    done
}

# Killed in its first rounds, then killed again once resumed and past
# what it restored: a resume of a resumed job.
kill_at run1 4
first=$KEPT
kill_at run2 $((first + 4))
grep -q "$first trials already in the store" "$T/run2.log" ||
    fail "run2 did not restore the $first records: $(head -3 "$T/run2.log")"
before=$KEPT
cat "$T/run1.jsonl" "$T/run2.jsonl" >"$T/before.jsonl"

"$KILN" "${JOB[@]}" >"$T/run3.out" 2>"$T/run3.log" || fail "the resumed run exited $?"
grep -q "$before trials already in the store" "$T/run3.log" ||
    fail "run3 did not restore the $before records: $(head -3 "$T/run3.log")"
grep -q "^Total trials: $BUDGET$" "$T/run3.out" ||
    fail "the resumed run's total: $(grep 'Total trials' "$T/run3.out")"
"$KILN" db export --db "$T/db" --out "$T/after.jsonl" || fail "export after"
python3 - "$T/before.jsonl" "$T/after.jsonl" "$BUDGET" <<'P' || fail "the store after the resume"
import json, sys
def recs(path):
    return [l for l in open(path).read().splitlines() if '"type":"record"' in l]
before, after, budget = recs(sys.argv[1]), recs(sys.argv[2]), int(sys.argv[3])
ok = True
missing = set(before) - set(after)
if missing:
    print(f"{len(missing)} record(s) committed before the kill are gone"); ok = False
if len(after) != budget:
    print(f"{len(after)} records after the resume, expected {budget}"); ok = False
pairs = [(r["workload_key"], r["trace_hash"]) for r in map(json.loads, after)]
if len(set(pairs)) != len(pairs):
    print(f"{len(pairs) - len(set(pairs))} (workload, trace) pair(s) measured twice"); ok = False
print(f"before {len(set(before))}, after {len(after)}, distinct pairs {len(set(pairs))}")
sys.exit(0 if ok else 1)
P
[ "$(records "$T/db")" -eq "$BUDGET" ] || fail "kiln db ls does not count $BUDGET"
echo PASS
