#!/usr/bin/env bash
# kiln serve with several tenants, CURVE on, all on loopback: clients alice
# and bob (KEYS/clients/), an operator op (KEYS/operators/ only), agent a0
# and a second agent key "evil" whose agent also calls itself a0:
#  1. a job name belongs to the key that opened it: alice's job stopped for
#     4.5 s (its connection silent past the reconnect window) is not taken
#     over by bob's JobHello of that name; resumed, alice's job carries on;
#     gone, its name stays alice's (bob refused again, naming the hold);
#  2. an agent name belongs to its agent key: "evil" registering as a0 is
#     refused while a0 lives, the head keeps one a0;
#  3. a client sees its own jobs only, an operator every job (agents are
#     listed for all);
#  4. drain / undrain from a client key are refused ("needs an operator
#     key") and change nothing, --state included; from op they work;
#  5. per-job limits: a tune whose batch is past --max-queued-per-job and a
#     kiln measure with a candidate past --max-candidate-bytes both end
#     with an error naming the limit, and the head holds nothing of them.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/serve_lib.sh"
OP="matmul M=256 N=256 K=256"
K="$T/keys"
"$KILN" keygen "$K" coordinator >/dev/null || fail "keygen coordinator"
"$KILN" keygen "$K" a0 --agent-key >/dev/null || fail "keygen a0"
# Another agent key whose pair is also called a0 (an agent's key file is
# its name), allow-listed as agents/evil.pub.
"$KILN" keygen "$T/evil" a0 >/dev/null || fail "keygen evil"
cp "$T/evil/a0.pub" "$K/agents/evil.pub"
for c in alice bob; do "$KILN" keygen "$K" $c --client >/dev/null || fail "keygen $c"; done
"$KILN" keygen "$K" op --operator >"$T/keygen-op.txt" || fail "keygen --operator"
grep -q "allow-listed as an operator" "$T/keygen-op.txt" || fail "keygen --operator: $(cat "$T/keygen-op.txt")"
[ -f "$K/operators/op.pub" ] && [ ! -f "$K/clients/op.pub" ] || fail "op.pub not in operators/ only"

KILN_LOG=info "$KILN" serve --agents 'tcp://127.0.0.1:*' \
    --clients 'tcp://127.0.0.1:*' --keys "$K" --state "$T/state" \
    --max-queued-per-job 100 --max-candidate-bytes 65536 \
    2>"$T/serve.log" &
SERVE_PID=$!
PIDS+=("$SERVE_PID")
wait_for 10 grep -q "jobs on" "$T/serve.log" || fail "kiln serve did not bind"
grep -q "1 operator key(s) in $K/operators" "$T/serve.log" || fail "operators not read: $(cat "$T/serve.log")"
AEP=$(sed -n 's/.*agents on \(tcp:[^,]*\), jobs on \(tcp:.*\)$/\1/p' "$T/serve.log")
CEP=$(sed -n 's/.*agents on \(tcp:[^,]*\), jobs on \(tcp:.*\)$/\2/p' "$T/serve.log")

# st KEY [args]: the head's status as KEY sees it, JSON.
st() { local k=$1; shift; "$KILN" fleet status --head "$CEP" --keys "$K" --key "$k" --json "$@"; }
status() { st op "$@"; }
jobnames() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join(sorted(j["name"] for j in d["jobs"])), d["all_jobs"])'; }
n_named() { python3 -c 'import json,sys; print(sum(a["name"]==sys.argv[1] for a in json.load(sys.stdin)["agents"]))' "$1"; }
# job NAME KEY TRIALS [more]: a simulated tune of NAME with KEY's pair, in
# the background (TUNE_PID), 16 candidates a round.
job() {
    local n=$1 key=$2 trials=$3
    shift 3
    "$KILN" tune --op "$OP" --simulate --strategy replay --seed 1 \
        --max-trials-per-task "$trials" --trials-per-iter 16 --db "$T/db-$n-$key" \
        --fleet "$CEP" --keys "$K" --key "$key" --name "$n" "$@" \
        >"$T/$n-$key.out" 2>"$T/$n-$key.log" &
    TUNE_PID=$!
    PIDS+=("$TUNE_PID")
}

agent a0 a0
one_agent() { [ "$(status | nagents)" = 1 ]; }
wait_for 15 one_agent || fail "a0 did not register: $(status)"

# ---- 2. agent name bound to its key ----
"$KILN_AGENT" --connect "$AEP" --keys "$T/evil" --name a0 \
    --coordinator-key "$K/coordinator.pub" --simulate --heartbeat-ms 500 \
    --simulate-ms 20 2>"$T/agent-evil.log" &
EVIL=$!
PIDS+=("$EVIL")
wait_for 10 grep -q "agent name a0 is taken" "$T/serve.log" ||
    fail "evil as a0 not refused: $(grep -i "a0\|evil" "$T/serve.log")"
sleep 1
[ "$(status | n_named a0)" = 1 ] || fail "two a0: $(status)"
[ "$(status | field agents a0 results)" != none ] || fail "a0 gone: $(status)"
kill -TERM "$EVIL"

# ---- 1. job name bound to its key ----
job shared alice 100000
PA=$TUNE_PID
wait_for 30 going shared 20 || fail "alice's job did not start: $(status)"
alice=$(cat "$K/alice.pub")
kill -STOP "$PA"
sleep 4.5
"$KILN" tune --op "$OP" --simulate --max-trials-per-task 8 --db "$T/db-bob" \
    --fleet "$CEP" --keys "$K" --key bob --name shared --agent-wait-s 2 \
    >"$T/bob.out" 2>"$T/bob.log"
[ $? -eq 1 ] || fail "bob's JobHello of alice's job was not refused"
grep -q "job shared is running on this head under another client key" "$T/bob.log" ||
    fail "bob: $(cat "$T/bob.log")"
[ "$(status | field jobs shared owner_key)" = "$alice" ] ||
    fail "shared's owner: $(status | field jobs shared owner_key)"
kill -CONT "$PA"
before=$(status | field jobs shared done)
more() { [ "$(status | field jobs shared done)" -gt $((before + 50)) ] 2>/dev/null; }
wait_for 30 more || fail "alice's job did not carry on: $(status)"
[ "$(status | field jobs shared owner_key)" = "$alice" ] || fail "shared changed hands"
kill -TERM "$PA"
wait "$PA" 2>/dev/null
gone() { [ "$(status | field jobs shared name)" = none ]; }
wait_for 15 gone || fail "alice's job still listed: $(status)"
"$KILN" tune --op "$OP" --simulate --max-trials-per-task 8 --db "$T/db-bob" \
    --fleet "$CEP" --keys "$K" --key bob --name shared --agent-wait-s 2 \
    >"$T/bob2.out" 2>"$T/bob2.log"
[ $? -eq 1 ] || fail "bob took the name of alice's job just gone"
grep -q "job shared belongs to another client key" "$T/bob2.log" &&
    grep -q -- "--name-hold-s" "$T/bob2.log" || fail "bob2: $(cat "$T/bob2.log")"

# ---- 3. each client its own jobs ----
job ja alice 100000
PJA=$TUNE_PID
job jb bob 100000
PJB=$TUNE_PID
wait_for 30 going ja jb 10 || fail "ja / jb did not start: $(status)"
[ "$(st alice | jobnames)" = "ja False" ] || fail "alice sees: $(st alice | jobnames)"
[ "$(st bob | jobnames)" = "jb False" ] || fail "bob sees: $(st bob | jobnames)"
[ "$(st op | jobnames)" = "ja jb True" ] || fail "op sees: $(st op | jobnames)"
[ "$(st alice | nagents)" = 1 ] || fail "alice sees no agent: $(st alice)"
"$KILN" fleet status --head "$CEP" --keys "$K" --key alice >"$T/alice-table.txt" ||
    fail "status table exited $?"
grep -q "1 job(s) of this client key" "$T/alice-table.txt" || fail "table: $(cat "$T/alice-table.txt")"
grep -q "^jb " "$T/alice-table.txt" && fail "alice's table shows jb"

# ---- 4. drain needs an operator key ----
: >"$T/drained.before"
cp "$T/state/drained" "$T/drained.before"
"$KILN" fleet drain a0 --head "$CEP" --keys "$K" --key alice >"$T/d1.txt" 2>"$T/d1.log"
[ $? -eq 1 ] || fail "a client's drain was not refused"
grep -q "drain needs an operator key" "$T/d1.log" || fail "drain: $(cat "$T/d1.log")"
[ "$(status | field agents a0 drained)" = False ] || fail "a0 drained by alice"
cmp -s "$T/state/drained" "$T/drained.before" || fail "--state changed: $(cat "$T/state/drained")"
"$KILN" fleet drain a0 --head "$CEP" --keys "$K" --key op >/dev/null || fail "op's drain exited $?"
[ "$(status | field agents a0 drained)" = True ] || fail "a0 not drained by op"
[ "$(cat "$T/state/drained")" = a0 ] || fail "--state: $(cat "$T/state/drained")"
"$KILN" fleet undrain a0 --head "$CEP" --keys "$K" --key bob 2>"$T/d2.log"
[ $? -eq 1 ] && grep -q "undrain needs an operator key" "$T/d2.log" || fail "bob's undrain: $(cat "$T/d2.log")"
[ "$(status | field agents a0 drained)" = True ] || fail "a0 undrained by bob"
"$KILN" fleet undrain a0 --head "$CEP" --keys "$K" --key op >/dev/null || fail "op's undrain exited $?"
[ "$(status | field agents a0 drained)" = False ] || fail "a0 still drained"
[ ! -s "$T/state/drained" ] || fail "--state after undrain: $(cat "$T/state/drained")"
kill -TERM "$PJA" "$PJB"
wait "$PJA" "$PJB" 2>/dev/null

# ---- 5. per-job limits ----
job big alice 1000 --trials-per-iter 128 --agent-wait-s 10
PB=$TUNE_PID
wait_for 30 bash -c "! kill -0 $PB 2>/dev/null" || fail "big did not end: $(status)"
wait "$PB"
[ $? -ne 0 ] || fail "a tune past --max-queued-per-job ended well"
grep -q "kiln tune: .*refused this job's work.*--max-queued-per-job 100" "$T/big-alice.log" ||
    fail "big: $(tail -5 "$T/big-alice.log")"
grep -q "job big: request .* refused" "$T/serve.log" || fail "no refusal in the head's log"
make_candidates "$T/c"
ok=$(ls "$T"/c/ok_*.c | head -1)
cp "$ok" "$T/c/huge.c"
python3 -c 'import sys; open(sys.argv[1], "a").write("/*" + "x" * 70000 + "*/\n")' "$T/c/huge.c"
"$KILN" measure --args "$ARGS" --reference "$T/c/ref.c" --fleet "$CEP" \
    --keys "$K" --key bob --target sim/cpu --db "$T/db-m" "${EVAL[@]}" \
    --agent-wait-s 10 "$ok" "$T/c/huge.c" >"$T/m.out" 2>"$T/m.log"
[ $? -ne 0 ] || fail "a candidate past --max-candidate-bytes was measured"
grep -q -- "kiln measure: .*--max-candidate-bytes 65536" "$T/m.log" || fail "measure: $(tail -5 "$T/m.log")"
nothing() { [ "$(st op | njobs)" = 0 ]; }
wait_for 10 nothing || fail "the refused jobs are still held: $(status)"

kill -TERM "$SERVE_PID"
wait_for 10 grep -q "kiln serve: stopped" "$T/serve.log" || fail "kiln serve did not stop on SIGTERM"
wait "$SERVE_PID" || fail "kiln serve exited $? on SIGTERM"
echo "PASS"
