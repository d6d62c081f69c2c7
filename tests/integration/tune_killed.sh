#!/usr/bin/env bash
# A hard kill and a resume: kiln tune --model on the local fleet (a real
# kiln-agent, real compiles and timings) is SIGKILLed mid-job once the
# store holds some records. Its local agent goes with it (it asked for
# SIGTERM on its parent's death). The same command on the same store then
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
    "$KILN" db ls --db "$1" 2>/dev/null | awk 'NR > 1 { n += $(NF - 3) } END { print n + 0 }'
}
JOB=(tune --model "$T/tiny.graph" --max-trials-global "$BUDGET"
    --trials-per-iter 4 --db "$T/db" --seed 1 --strategy replay --quiet
    "${TEVAL[@]}") # the same both times

"$KILN" "${JOB[@]}" >"$T/run1.out" 2>"$T/run1.log" &
pid=$!
PIDS+=("$pid")
some() { n=$(records "$T/db"); [ "$n" -ge 4 ]; }
wait_for 120 some || fail "no record in the store after 120 s"
agents=$(pgrep -P "$pid")
[ -n "$agents" ] || fail "kiln tune has no local agent"
kill -KILL "$pid"
wait "$pid" 2>/dev/null
"$KILN" db export --db "$T/db" --out "$T/before.jsonl" || fail "export before"
before=$(grep -c '"type":"record"' "$T/before.jsonl")
echo "killed kiln tune (pid $pid) with $before record(s) in the store"
[ "$before" -ge 4 ] || fail "$before records before the kill"
[ "$before" -lt "$BUDGET" ] || fail "the job was done before the kill: nothing to resume"
# Its local agent(s) follow it.
for a in $agents; do
    wait_for 10 bash -c "! kill -0 $a 2>/dev/null" ||
        { kill -KILL "$a"; fail "agent $a outlived its killed kiln"; }
done

"$KILN" "${JOB[@]}" >"$T/run2.out" 2>"$T/run2.log" || fail "the resumed run exited $?"
grep -q "$before trials already in the store" "$T/run2.log" ||
    fail "the resumed run did not restore the $before records: $(head -3 "$T/run2.log")"
grep -q "^Total trials: $BUDGET$" "$T/run2.out" ||
    fail "the resumed run's total: $(grep 'Total trials' "$T/run2.out")"
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
print(f"before {len(before)}, after {len(after)}, distinct pairs {len(set(pairs))}")
sys.exit(0 if ok else 1)
P
[ "$(records "$T/db")" -eq "$BUDGET" ] || fail "kiln db ls does not count $BUDGET"
echo PASS
