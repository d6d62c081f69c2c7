#!/usr/bin/env bash
# kiln serve: one head node, two simulated kiln-agents, CURVE on, jobs
# through kiln tune --fleet, all on loopback:
#  1. two concurrent jobs finish with exactly their trial counts (600), each
#     in its own store, and while both run the head's status shows each getting
#     40-60% of the results; with weights 3 and 1, 65-85% for the first;
#  2. a client key cannot register as an agent, an agent key cannot submit
#     (nor ask for status);
#  3. a drained agent takes no work while another job runs; undrained, it
#     does again (both with an operator key, KEYS/operators/);
#  4. a job SIGKILLed: the head drops it (status shows it gone) and its
#     work with it;
#  5. a job SIGSTOPped for 6 s, which the head drops as silent: resumed,
#     it sends its unanswered work again and ends with exactly its trials;
#  6. --insecure on a non-loopback endpoint is refused.
# The agents take 20 ms per answer (--simulate-ms), so that the fleet, not
# the jobs' search, is what the jobs compete for.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/serve_lib.sh"
OP="matmul M=256 N=256 K=256"
K="$T/keys"
"$KILN" keygen "$K" coordinator >/dev/null || fail "keygen coordinator"
for a in a0 a1; do "$KILN" keygen "$K" $a --agent-key >/dev/null || fail "keygen $a"; done
"$KILN" keygen "$K" client --client >"$T/keygen.txt" || fail "keygen --client"
"$KILN" keygen "$K" op --operator >/dev/null || fail "keygen --operator"
grep -q "allow-listed as a client" "$T/keygen.txt" || fail "keygen --client: $(cat "$T/keygen.txt")"
[ -f "$K/clients/client.pub" ] || fail "no $K/clients/client.pub"

KILN_LOG=info "$KILN" serve --agents 'tcp://127.0.0.1:*' \
    --clients 'tcp://127.0.0.1:*' --keys "$K" --client-timeout-s 2 \
    2>"$T/serve.log" &
SERVE_PID=$!
PIDS+=("$SERVE_PID")
wait_for 10 grep -q "jobs on" "$T/serve.log" || fail "kiln serve did not bind"
AEP=$(sed -n 's/.*agents on \(tcp:[^,]*\), jobs on \(tcp:.*\)$/\1/p' "$T/serve.log")
CEP=$(sed -n 's/.*agents on \(tcp:[^,]*\), jobs on \(tcp:.*\)$/\2/p' "$T/serve.log")
[ -n "$AEP" ] && [ -n "$CEP" ] || fail "endpoints: $(cat "$T/serve.log")"

agent a0 a0
agent a1 a1
two_agents() { [ "$(status | nagents)" = 2 ]; }
wait_for 15 two_agents || fail "the two agents did not register: $(status)"

# ---- 1. two jobs, fair share; then weights 3 : 1 ----
pair ja 1 jb 1 0.4 0.6
[ "$(status | njobs)" = 0 ] || fail "finished jobs still listed: $(status)"
pair jw3 3 jw1 1 0.65 0.85
[ "$(status | njobs)" = 0 ] || fail "finished jobs still listed: $(status)"

# ---- 2. keys in the wrong role ----
client_not_agent "$T/serve.log"
"$KILN" fleet status --head "$CEP" --keys "$K" --key a0 --timeout-s 2 \
    >"$T/as-client.txt" 2>"$T/as-client.log"
[ $? -eq 1 ] || fail "an agent key got a status: $(cat "$T/as-client.txt")"
grep -q "refused this side's key" "$T/as-client.log" ||
    fail "agent key as client: $(cat "$T/as-client.log")"
"$KILN" tune --op "$OP" --simulate --max-trials-per-task 8 --db "$T/db-x" \
    --fleet "$CEP" --keys "$K" --key a0 --name intruder --agent-wait-s 2 \
    >"$T/intruder.out" 2>"$T/intruder.log"
[ $? -eq 1 ] || fail "a job with an agent key was not refused"
grep -q "refused this side's key" "$T/intruder.log" ||
    fail "agent key as job: $(cat "$T/intruder.log")"

# ---- 3. drain ----
"$KILN" fleet drain a0 --head "$CEP" --keys "$K" --key op >"$T/drain.txt" ||
    fail "drain exited $?"
[ "$(status | field agents a0 drained)" = True ] || fail "a0 not drained: $(status)"
before0=$(status | field agents a0 results)
before1=$(status | field agents a1 results)
tune jc 200
wait "$TUNE_PID" || fail "job jc exited $?"
grep -q "^trials *200 (200 valid" "$T/jc.out" || fail "jc: $(grep ^trials "$T/jc.out")"
after0=$(status | field agents a0 results)
after1=$(status | field agents a1 results)
[ "$after0" = "$before0" ] || fail "drained a0 measured $((after0 - before0))"
[ $((after1 - before1)) -eq 200 ] || fail "a1 measured $((after1 - before1)), not 200"
"$KILN" fleet drain nobody --head "$CEP" --keys "$K" --key op 2>/dev/null
[ $? -eq 3 ] || fail "draining an unknown agent must exit 3"
"$KILN" fleet undrain a0 --head "$CEP" --keys "$K" --key op >/dev/null || fail "undrain"
[ "$(status | field agents a0 drained)" = False ] || fail "a0 still drained"

# ---- 4. a job SIGKILLed ----
tune jd 100000
PD=$TUNE_PID
wait_for 20 going jd 0 || fail "jd did not start: $(status)"
# The head knows whose job it is: the client key it said hello with.
[ "$(status | field jobs jd owner_key)" = "$(cat "$K/client.pub")" ] ||
    fail "jd's owner key: $(status | field jobs jd owner_key)"
kill -KILL "$PD"
wait "$PD" 2>/dev/null
gone() { [ "$(status | field jobs jd name)" = none ]; }
wait_for 15 gone || fail "the killed job is still listed: $(status)"
grep -q "job jd gone (silent)" "$T/serve.log" || fail "no 'jd gone' in the head's log"
idle() { [ "$(status | field agents a0 busy)" = 0 ] && [ "$(status | field agents a1 busy)" = 0 ]; }
wait_for 15 idle || fail "agents still busy after the job was dropped: $(status)"

# ---- 5. a job stopped for 6 s ----
# SIGSTOP: its connection goes silent, the head drops it (--client-timeout-s
# 2, and ZeroMQ's heartbeats the connection) with its queued work, and what
# the head sent it meanwhile is lost. SIGCONT: the job says JobHello again,
# sends what is still unanswered (two rounds of 1500 at the head, so some
# is), and ends with exactly its trials.
tune js 3000 --trials-per-iter 1500
PS=$TUNE_PID
wait_for 30 going js || fail "js did not start: $(status)"
kill -STOP "$PS"
sleep 6
kill -CONT "$PS"
finish js "$PS" 90
grep -q "job js gone (silent)" "$T/serve.log" || fail "the head did not drop the stopped js"
grep -q "welcomed this job again: sending" "$T/js.log" ||
    fail "js did not send its unanswered work again: $(grep fleet "$T/js.log")"
check_trials js 3000

# ---- 6. --insecure is for loopback only ----
"$KILN" serve --agents 'tcp://0.0.0.0:*' --clients 'tcp://127.0.0.1:*' \
    --insecure 2>"$T/insecure.txt"
[ $? -eq 2 ] || fail "kiln serve --insecure on 0.0.0.0 was not refused"
grep -q "loopback" "$T/insecure.txt" || fail "insecure: $(cat "$T/insecure.txt")"

kill -TERM "$SERVE_PID"
wait_for 10 grep -q "kiln serve: stopped" "$T/serve.log" || fail "kiln serve did not stop on SIGTERM"
wait "$SERVE_PID" || fail "kiln serve exited $? on SIGTERM"
echo "PASS"
