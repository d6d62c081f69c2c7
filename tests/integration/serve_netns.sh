#!/usr/bin/env bash
# kiln serve across hosts: the head, two simulated kiln-agents and two jobs
# each in a network namespace of its own, joined by veth pairs to a bridge
# in a sixth namespace (10.231.0.0/24, no default route, nothing in the
# root namespace), CURVE on:
#  1. two concurrent jobs of equal weight from two client hosts: each gets
#     40-60% of the results while both have work queued, and ends with
#     exactly its trials;
#  2. agent a0's link cut for 10 s mid-job: the head loses it, a1 measures
#     its work, a0 rejoins by itself and measures again, and the job's
#     store holds exactly its trials (none lost, none twice);
#  3. job jc's link cut for 10 s mid-job: the results the head sent it
#     meanwhile are lost with the connection; jc says JobHello again, sends
#     what is unanswered once more, and ends with exactly its trials;
#  4. with two jobs running, the head's link cut for 10 s (it loses every
#     agent and job connection, and keeps its state), then the head
#     SIGKILLed and started again on the same endpoints: each time the
#     agents and both jobs come back by themselves, and both jobs end with
#     exactly their trials, none twice;
#  5. a client key used as an agent is refused.
# Each cut is at the bridge (the switch's port): the host's packets vanish,
# no error tells either side, its own eth0 stays up.
# Needs root (ip netns add); says SKIP otherwise.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/serve_lib.sh"
OP="matmul M=256 N=256 K=256"
K="$T/keys"
now() { date +%s.%N; }
T0=$(now)
elapsed() { python3 -c "import sys,time; print(f'{time.time()-float(sys.argv[1]):.1f}')" "$1"; }
# since T0 SECONDS: sleeps until SECONDS after T0
since() { python3 -c "import sys,time; time.sleep(max(0, float(sys.argv[2]) - (time.time() - float(sys.argv[1]))))" "$1" "$2"; }

# ---- the network ----
NS=kiln-$$
HOSTS=(head a0 a1 c0 c1)
declare -A ADDR=([head]=10.231.0.1 [a0]=10.231.0.10 [a1]=10.231.0.11
    [c0]=10.231.0.20 [c1]=10.231.0.21)
NS_MADE=()
netns_cleanup() {
    cleanup # the processes first: they live in the namespaces
    for n in "${NS_MADE[@]}"; do ip netns del "$n" 2>/dev/null; done
}
trap netns_cleanup EXIT
command -v ip >/dev/null || { echo "SKIP: no ip (iproute2)"; exit 77; }
if ! ip netns add "$NS-br" 2>"$T/netns.err"; then
    echo "SKIP: ip netns add: $(cat "$T/netns.err") (needs root)"
    exit 77
fi
NS_MADE+=("$NS-br")
ip -n "$NS-br" link set lo up || fail "lo up in $NS-br"
ip -n "$NS-br" link add br0 type bridge || fail "bridge in $NS-br"
ip -n "$NS-br" link set br0 up || fail "br0 up"
for h in "${HOSTS[@]}"; do
    ip netns add "$NS-$h" || fail "ip netns add $NS-$h"
    NS_MADE+=("$NS-$h")
    ip link add eth0 netns "$NS-$h" type veth peer name "v-$h" netns "$NS-br" ||
        fail "veth for $h"
    ip -n "$NS-br" link set "v-$h" master br0 up || fail "v-$h on br0"
    ip -n "$NS-$h" link set lo up || fail "lo up in $h"
    ip -n "$NS-$h" addr add "${ADDR[$h]}/24" dev eth0 || fail "address of $h"
    ip -n "$NS-$h" link set eth0 up || fail "eth0 up in $h"
done
ip -n "$NS-head" route | grep -q default && fail "a default route in the head's namespace"

in_agent() {
    local h=$1
    case $h in a0 | a1) ;; *) h=a0 ;; esac # the client key tries from a0
    echo ip netns exec "$NS-$h"
}
# Jobs and queries: ja, jl, jc and jr0 from c0; jb, jr1 and status from c1.
in_client() {
    local h=c0
    case $1 in jb | jr1 | status) h=c1 ;; esac
    echo ip netns exec "$NS-$h"
}

# ---- keys, the head, the agents ----
"$KILN" keygen "$K" coordinator >/dev/null || fail "keygen coordinator"
for a in a0 a1; do "$KILN" keygen "$K" $a --agent-key >/dev/null || fail "keygen $a"; done
"$KILN" keygen "$K" client --client >/dev/null || fail "keygen --client"
AEP=tcp://${ADDR[head]}:7001
CEP=tcp://${ADDR[head]}:7002
head_start() { # head_start LOG: kiln serve in the head's namespace
    KILN_LOG=info ip netns exec "$NS-head" "$KILN" serve --agents "$AEP" \
        --clients "$CEP" --keys "$K" 2>"$1" &
    SERVE_PID=$!
    PIDS+=("$SERVE_PID")
    wait_for 10 grep -q "jobs on" "$1" || fail "kiln serve did not bind: $(cat "$1")"
}
head_start "$T/serve.log"
# The head is not reachable from the root namespace, only from the hosts.
"$KILN" fleet status --head "$CEP" --keys "$K" --timeout-s 1 >/dev/null 2>&1 &&
    fail "the head answered from the root namespace"

agent a0 a0
agent a1 a1
two_agents() { [ "$(status | nagents)" = 2 ]; }
wait_for 20 two_agents || fail "the two agents did not register: $(status)"
echo "network up, head and two agents in $(elapsed "$T0") s"

# ---- 1. two jobs from two hosts, equal weights ----
t=$(now)
pair ja 1 jb 1 0.4 0.6
echo "1. two jobs of 600 trials from c0 and c1: $(elapsed "$t") s"
[ "$(status | njobs)" = 0 ] || fail "finished jobs still listed: $(status)"

# ---- 2. a0's link cut for 10 s mid-job ----
res() { status | field agents "$1" results; } # "none" when not listed
busy_both() { [ "$(res a0)" -gt 20 ] 2>/dev/null && [ "$(res a1)" -gt 20 ] 2>/dev/null; }
t=$(now)
tune jl 2500
PL=$TUNE_PID
wait_for 30 busy_both || fail "jl: the agents did not both measure: $(status)"
a1_before=$(res a1)
ip -n "$NS-br" link set v-a0 down || fail "link down"
tc=$(now)
a0_gone() { [ "$(res a0)" = none ]; }
wait_for 15 a0_gone || fail "the head still lists a0 after its link went down: $(status)"
echo "2. a0's link down: the head dropped a0 after $(elapsed "$tc") s"
since "$tc" 7
a1_cut=$(res a1)
[ "$a1_cut" -gt "$a1_before" ] 2>/dev/null ||
    fail "a1 measured nothing while a0 was cut ($a1_before -> $a1_cut)"
kill -0 "$PL" 2>/dev/null || fail "jl ended before a0's link came back (too short)"
since "$tc" 10
ip -n "$NS-br" link set v-a0 up || fail "link up"
echo "2. a0's link up after $(elapsed "$tc") s; a1 measured $((a1_cut - a1_before)) in the cut's first 7 s"
tu=$(now)
a0_back() { [ "$(res a0)" -gt 0 ] 2>/dev/null; }
wait_for 40 a0_back || fail "a0 did not rejoin and measure after its link came back: $(status)"
echo "2. a0 listed and measuring again $(elapsed "$tu") s after"
kill -0 "$PL" 2>/dev/null || fail "jl ended before a0 measured again"
wait "$PL" || fail "job jl exited $?"
check_trials jl 2500
grep -q "agent a0 .* lost" "$T/serve.log" || fail "the head did not log a0 lost"
echo "2. done in $(elapsed "$t") s"

# ---- 3. c0's link cut for 10 s mid-job ----
t=$(now)
tune jc 1500
PC=$TUNE_PID
wait_for 60 going jc || fail "jc did not start: $(status)"
ip -n "$NS-br" link set v-c0 down || fail "link down"
tc=$(now)
since "$tc" 10
ip -n "$NS-br" link set v-c0 up || fail "link up"
echo "3. c0's link up after $(elapsed "$tc") s"
tu=$(now)
finish jc "$PC" 60
echo "3. jc ended $(elapsed "$tu") s after"
grep -q "job jc reconnected" "$T/serve.log" || fail "the head did not log jc reconnected"
grep -q "welcomed this job again: sending" "$T/jc.log" ||
    fail "jc did not send its unanswered work again"
check_trials jc 1500
echo "3. done in $(elapsed "$t") s"

# ---- 4. the head's link cut for 10 s, then the head SIGKILLed ----
t=$(now)
tune jr0 2000
P0=$TUNE_PID
tune jr1 2000
P1=$TUNE_PID
wait_for 60 going jr0 jr1 || fail "jr0 and jr1 did not both start: $(status)"
ip -n "$NS-br" link set v-head down || fail "link down"
tc=$(now)
since "$tc" 10
ip -n "$NS-br" link set v-head up || fail "link up"
echo "4. the head's link up after $(elapsed "$tc") s"
tu=$(now)
wait_for 30 two_agents || fail "the agents did not come back: $(status)"
echo "4. both agents back $(elapsed "$tu") s after"
d=$(status | python3 -c 'import json,sys; print(max([x["done"] for x in json.load(sys.stdin)["jobs"]] or [0]))')
wait_for 30 going jr0 jr1 $((d + 100)) ||
    fail "the jobs did not get results again after the head's link came back: $(status)"
echo "4. both jobs measuring again $(elapsed "$tu") s after"
for n in jr0 jr1; do
    grep -q "welcomed this job again: sending" "$T/$n.log" ||
        fail "$n did not send its unanswered work again"
done
kill -KILL "$SERVE_PID"
wait "$SERVE_PID" 2>/dev/null
tk=$(now)
sleep 1.5
head_start "$T/serve2.log"
echo "4. head SIGKILLed, started again 1.5 s later, listening $(elapsed "$tk") s after the kill"
wait_for 30 two_agents || fail "the agents did not come back to the new head: $(status)"
echo "4. both agents back $(elapsed "$tk") s after the kill"
both_listed() { [ "$(status | njobs)" = 2 ]; }
wait_for 30 both_listed || fail "the jobs did not come back to the new head: $(status)"
echo "4. both jobs back $(elapsed "$tk") s after the kill"
kill -0 "$P0" 2>/dev/null && kill -0 "$P1" 2>/dev/null ||
    fail "a job ended before the head came back (too short)"
finish jr0 "$P0" 120
finish jr1 "$P1" 60
for n in jr0 jr1; do
    grep -q "is kiln-serve-.* now (was .*): sending" "$T/$n.log" ||
        fail "$n did not send its work again to the new head"
    check_trials "$n" 2000
done
echo "4. done in $(elapsed "$t") s"

# ---- 5. a client key as an agent ----
client_not_agent "$T/serve2.log"

echo "PASS in $(elapsed "$T0") s"
