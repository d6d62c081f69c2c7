#!/usr/bin/env bash
# kiln tune --simulate end to end, and what simulated results must never
# become (kl_target.h: a simulated device has a target of its own):
#  1. `kiln tune --op ... --simulate` runs on simulated local agents and
#     records 16 trials under sim/EXACT (EXACT: this machine's CPU target),
#     its best labelled simulated; a second run (--target sim/cpu, the
#     same job) restores them.
#  2. None of it counts for EXACT: kiln db best and kiln export find no
#     valid record there, kiln export refuses the simulated target, kiln
#     report finds no record on EXACT, and a real job on the same store
#     restores nothing.
#  3. A simulated agent never serves the real target: a `kiln tune
#     --listen` job for EXACT with only a `kiln-agent --simulate` connected
#     finds no agent and records nothing.
. "$(dirname "$0")/lib.sh"
OP="matmul M=64 N=64 K=64"
SIMARGS=(--strategy replay --max-trials-per-task 16 --trials-per-iter 8
         --seed 1)

"$KILN" tune --op "$OP" --simulate "${SIMARGS[@]}" --db "$T/db" \
    >"$T/out.txt" 2>"$T/tune.log" || fail "kiln tune --simulate exited $?"
SIM=$(sed -n 's/^workload .*(\(sim\/cpu\/[^)]*\))$/\1/p' "$T/out.txt")
[ -n "$SIM" ] || fail "the task's target is not a sim/cpu/ one: $(head -1 "$T/out.txt")"
EXACT=${SIM#sim/}
grep -q "^trials *16 (16 valid, 0 restored" "$T/out.txt" || fail "not 16 valid trials"
grep -q "^best .*simulated" "$T/out.txt" || fail "best not labelled simulated"
# --target sim/cpu is the same job.
"$KILN" tune --op "$OP" --target sim/cpu "${SIMARGS[@]}" --db "$T/db" \
    >"$T/out2.txt" 2>"$T/tune2.log" || fail "resumed kiln tune --simulate exited $?"
grep -q "^trials *16 (16 valid, 16 restored" "$T/out2.txt" ||
    fail "the resumed simulated run did not restore 16"

out=$("$KILN" db ls --db "$T/db") || fail "db ls"
echo "$out" | grep -q "matmul_64_64_64 .* $SIM  *warm  *16  *16 .*(sim)" ||
    fail "db ls: $out"
echo "$out" | grep -q " $EXACT " && fail "db ls shows a row of $EXACT: $out"
"$KILN" db best --db "$T/db" --name matmul_64_64_64 >"$T/best.txt" ||
    fail "db best exited $?"
grep -q "^target *$SIM$" "$T/best.txt" || fail "db best: $(cat "$T/best.txt")"
grep -q "^latency .*(simulated)" "$T/best.txt" || fail "db best: not labelled"
"$KILN" db best --db "$T/db" --name matmul_64_64_64 --target cpu 2>/dev/null
[ $? -eq 3 ] || fail "db best on $EXACT must find no valid record"
"$KILN" export --db "$T/db" --op "$OP" --out "$T/exp" 2>"$T/exp.log"
[ $? -eq 3 ] || fail "export on $EXACT must find no record: $(cat "$T/exp.log")"
"$KILN" export --db "$T/db" --op "$OP" --target "$SIM" --out "$T/exp" \
    2>"$T/exp2.log"
[ $? -eq 2 ] || fail "export of $SIM must be refused"
grep -q "simulated" "$T/exp2.log" || fail "export of $SIM: $(cat "$T/exp2.log")"
"$KILN" report --db "$T/db" --html "$T/r.html" 2>"$T/report.log"
[ $? -eq 3 ] || fail "report on $EXACT must find no record"

# A real job on the same store (no agent: it stops after a second).
"$KILN" tune --op "$OP" --db "$T/db" --listen 'tcp://127.0.0.1:*' --insecure \
    --agent-wait-s 1 --max-trials-per-task 8 >"$T/real.txt" 2>"$T/real.log"
[ $? -eq 1 ] || fail "a real job without agents must fail"
grep -q "^trials *0 (0 valid, 0 restored" "$T/real.txt" ||
    fail "the real job restored simulated records: $(head -2 "$T/real.txt")"

# A simulated agent connected to a real job does not serve it.
KILN_LOG=info "$KILN" tune --op "$OP" --db "$T/db2" \
    --listen 'tcp://127.0.0.1:*' --insecure --agent-wait-s 4 \
    --max-trials-per-task 8 >"$T/l.txt" 2>"$T/l.log" &
TUNE_PID=$!
PIDS+=("$TUNE_PID")
wait_for 10 grep -q "listening on" "$T/l.log" || fail "kiln tune did not bind"
EP=$(sed -n 's/^kiln tune: listening on \(tcp:[^ ]*\).*/\1/p' "$T/l.log" | head -1)
"$KILN_AGENT" --connect "$EP" --insecure --simulate --name simulated \
    --heartbeat-ms 200 2>"$T/agent.log" &
PIDS+=("$!")
wait "$TUNE_PID"
[ $? -eq 1 ] || fail "a real job served by a simulated agent only must fail"
grep -q "no agent for target '$EXACT'" "$T/l.log" || fail "$(tail -3 "$T/l.log")"
grep -q "^trials *0 (0 valid" "$T/l.txt" || fail "$(head -2 "$T/l.txt")"
grep -q "agent simulated .* joined: $SIM" "$T/l.log" ||
    fail "the simulated agent did not join as $SIM"
echo "PASS: 16 simulated trials on $SIM, none of them on $EXACT"
