#!/usr/bin/env bash
# tools/soak.sh [MINUTES] - a bounded soak of a shared head node (kiln
# serve) under random faults; default 10 minutes.
#
# A head, simulated agents (kiln-agent --simulate) and one real agent
# (real compiles and timings), CURVE on, and a stream of tuning jobs
# (kiln tune --fleet, each with its own store), three at a time, each run
# to its exact trial budget. Every 10-30 s one fault, at random:
#   agent-kill   an agent SIGKILLed (its supervisor restarts it 1 s later)
#   head-kill    the head SIGKILLed (restarted 1-3 s later on the same
#                endpoints; agents and jobs reconnect by themselves)
#   link-down    an agents' host's link down for 10 s (network namespaces)
#   client-kill  a job SIGKILLed mid-round; run again on its store until it
#                ends (a resume)
# The hosts are Linux network namespaces made here and deleted at exit
# (veth pairs, 10.232.0.0/16 inside them only); without root the soak runs
# on loopback and skips link-down.
#
# At the end each job's store is checked: exactly its budget of records,
# no (workload, trace) pair twice (duplicates), and every record seen in a
# snapshot taken after a client kill still there (lost). Prints jobs run,
# results, faults injected, lost and duplicates; exits 1 when a job failed
# or lost or duplicates is not 0.
#
# Env: KILN, KILN_AGENT (default: the build tree's), SOAK_SEED (RANDOM's
# seed), SOAK_KEEP=1 keeps the work dir.
set -u
MINUTES=${1:-10}
case $MINUTES in '' | *[!0-9.]*) echo "usage: tools/soak.sh [MINUTES]" >&2; exit 2 ;; esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KILN=${KILN:-$ROOT/build/tools/kiln}
KILN_AGENT=${KILN_AGENT:-$ROOT/build/agent/kiln-agent}
for b in "$KILN" "$KILN_AGENT"; do
    [ -x "$b" ] || { echo "soak: $b not built (ninja -C build)" >&2; exit 2; }
done
RANDOM=${SOAK_SEED:-$$}
W=$(mktemp -d "${TMPDIR:-/tmp}/kiln-soak-XXXXXX")
NS=ksoak$$
STOP="$W/stop"
END=$(( $(date +%s) + ${MINUTES%.*} * 60 ))
declare -A FAULTS=([agent-kill]=0 [head-kill]=0 [link-down]=0 [client-kill]=0)
NETNS=0

log() { echo "[$(date +%H:%M:%S)] $*"; }

cleanup() {
    touch "$STOP"
    pkill -KILL -f "$W/" 2>/dev/null
    for p in $(jobs -p); do kill -KILL "$p" 2>/dev/null; done
    wait 2>/dev/null
    if [ "$NETNS" = 1 ]; then
        for n in head a0 a1; do ip netns del "$NS-$n" 2>/dev/null; done
    fi
    [ "${SOAK_KEEP:-0}" = 1 ] && echo "soak: kept $W" || rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# ---- hosts ------------------------------------------------------------------
# head: 10.232.1.1 to a0 (10.232.1.2), 10.232.2.1 to a1 (10.232.2.2).
# on HOST: the command prefix that runs a program on that host, in ON[@]
# (ip netns exec execs the program: its pid is the one $! gives).
on() { ON=(); [ "$NETNS" = 1 ] && ON=(ip netns exec "$NS-$1"); }
if ip netns add "$NS-head" 2>/dev/null; then
    NETNS=1
    ip netns add "$NS-a0" && ip netns add "$NS-a1" || exit 1
    for i in 0 1; do
        s=$((i + 1))
        ip link add "$NS-h$i" netns "$NS-head" type veth peer name "$NS-v$i" \
            netns "$NS-a$i" || exit 1
        ip -n "$NS-head" addr add "10.232.$s.1/24" dev "$NS-h$i"
        ip -n "$NS-a$i" addr add "10.232.$s.2/24" dev "$NS-v$i"
        ip -n "$NS-head" link set "$NS-h$i" up
        ip -n "$NS-a$i" link set "$NS-v$i" up
        ip -n "$NS-a$i" link set lo up
    done
    ip -n "$NS-head" link set lo up
    HEAD_IP=(10.232.1.1 10.232.2.1) # as each agents' host reaches it
    BIND=0.0.0.0
    log "hosts: network namespaces $NS-head, $NS-a0, $NS-a1"
else
    HEAD_IP=(127.0.0.1 127.0.0.1)
    BIND=127.0.0.1
    log "hosts: no network namespaces here (not root?): loopback, no link-down"
fi
APORT=17070
CPORT=17071
CEP=tcp://127.0.0.1:$CPORT # jobs run on the head's host

K="$W/keys"
"$KILN" keygen "$K" coordinator >/dev/null || exit 1
"$KILN" keygen "$K" client --client >/dev/null || exit 1
AGENTS=(s0 s1 s2 real)
for a in "${AGENTS[@]}"; do "$KILN" keygen "$K" "$a" --agent-key >/dev/null || exit 1; done

# ---- supervised processes ---------------------------------------------------
# supervise NAME HOST DELAY CMD...: runs CMD on HOST until $STOP, again
# DELAY s after each exit; its pid in $W/NAME.pid.
supervise() {
    local name=$1 host=$2 delay=$3
    shift 3
    (
        while [ ! -e "$STOP" ]; do
            on "$host"
            "${ON[@]}" "$@" 2>>"$W/$name.log" &
            echo $! >"$W/$name.pid"
            wait $!
            [ -e "$STOP" ] || sleep "$delay"
        done
    ) 2>/dev/null & # no "Killed" notices: the faults are logged
}
KILN_LOG=${KILN_LOG:-info} supervise head head 1 "$KILN" serve --agents "tcp://$BIND:$APORT" \
    --clients "tcp://$BIND:$CPORT" --keys "$K" --heartbeat-ms 500 \
    --client-timeout-s 5
AGENT_HOST=([0]=a0 [1]=a0 [2]=a1 [3]=a1)
for i in "${!AGENTS[@]}"; do
    a=${AGENTS[$i]} h=${AGENT_HOST[$i]}
    ip_of=${HEAD_IP[${h#a}]}
    sim=(--simulate --simulate-ms 20)
    [ "$a" = real ] && sim=()
    supervise "agent-$a" "$h" 1 "$KILN_AGENT" --connect "tcp://$ip_of:$APORT" \
        --keys "$K" --name "$a" --coordinator-key "$K/coordinator.pub" \
        --heartbeat-ms 500 "${sim[@]}"
done

# ---- jobs -------------------------------------------------------------------
OPS=("matmul M=256 N=256 K=256" "matmul M=128 N=512 K=64"
    "conv2d N=1 C=64 H=28 W=28 K=64 R=3 S=3 pad=1" "dense N=1 I=512 O=1000")
NJOB=0
# job N: runs job N to its end, again after each kill; its tune's pid in
# $W/jobN.pid, its outcome in $W/jobN.result ("ok", or "failed: why").
job() {
    local n=$1 op budget args tries=0 rc
    if [ $((n % 4)) = 3 ]; then # a real one, on the real agent
        op="matmul M=64 N=64 K=64" budget=24
        args=(--repeat 3 --min-repeat-ms 0 --timeout-ms 5000 --no-flush)
    else
        op=${OPS[$((RANDOM % ${#OPS[@]}))]} budget=$((200 + RANDOM % 300))
        args=(--simulate)
    fi
    echo "$budget" >"$W/job$n.budget"
    while :; do
        tries=$((tries + 1))
        on head
        "${ON[@]}" "$KILN" tune --op "$op" "${args[@]}" --max-trials-per-task "$budget" \
            --trials-per-iter 32 --db "$W/db$n" --fleet "$CEP" --keys "$K" \
            --name "job$n" --agent-wait-s 120 --quiet \
            >"$W/job$n.out" 2>>"$W/job$n.log" &
        echo $! >"$W/job$n.pid"
        wait $!
        rc=$?
        rm -f "$W/job$n.pid"
        if [ $rc = 0 ]; then echo ok >"$W/job$n.result"; return; fi
        if [ $tries -ge 20 ] || [ -e "$STOP" ]; then
            echo "failed: exit $rc after $tries runs: $(tail -1 "$W/job$n.log")" \
                >"$W/job$n.result"
            return
        fi
        sleep 1 # killed (137), refused while its old connection lingers, ...
    done
}
running_jobs() { ls "$W"/job*.budget 2>/dev/null | while read -r f; do
    [ -e "${f%.budget}.result" ] || echo "$f"; done | wc -l; }

# ---- faults -----------------------------------------------------------------
fault() {
    local kinds=(agent-kill head-kill client-kill) k pid f
    [ "$NETNS" = 1 ] && kinds+=(link-down)
    k=${kinds[$((RANDOM % ${#kinds[@]}))]}
    case $k in
    agent-kill)
        a=${AGENTS[$((RANDOM % ${#AGENTS[@]}))]}
        pid=$(cat "$W/agent-$a.pid" 2>/dev/null) && kill -KILL "$pid" 2>/dev/null ||
            return
        log "fault: agent $a SIGKILLed" ;;
    head-kill)
        pid=$(cat "$W/head.pid" 2>/dev/null) && kill -KILL "$pid" 2>/dev/null ||
            return
        log "fault: head SIGKILLed" ;;
    client-kill)
        f=$(ls "$W"/job*.pid 2>/dev/null | shuf -n 1 --random-source=<(yes $RANDOM))
        [ -n "$f" ] && pid=$(cat "$f" 2>/dev/null) || return
        n=$(basename "$f" .pid)
        kill -KILL "$pid" 2>/dev/null || return
        sleep 0.2
        # What the store holds now must be there at the end.
        "$KILN" db export --db "$W/db${n#job}" 2>/dev/null |
            grep '"type":"record"' >>"$W/${n}.kept"
        log "fault: $n SIGKILLed with $(grep -c . "$W/${n}.kept") record(s) kept" ;;
    link-down)
        i=$((RANDOM % 2))
        ip -n "$NS-a$i" link set "$NS-v$i" down
        log "fault: link of host a$i down for 10 s"
        (sleep 10; ip -n "$NS-a$i" link set "$NS-v$i" up) & ;;
    esac
    FAULTS[$k]=$((FAULTS[$k] + 1))
}

log "soak: $MINUTES minute(s), work dir $W"
next_fault=$(( $(date +%s) + 10 + RANDOM % 20 ))
while [ "$(date +%s)" -lt "$END" ]; do
    while [ "$(running_jobs)" -lt 3 ]; do
        job "$NJOB" 2>/dev/null &
        NJOB=$((NJOB + 1))
        sleep 0.2
    done
    if [ "$(date +%s)" -ge "$next_fault" ]; then
        fault
        next_fault=$(( $(date +%s) + 10 + RANDOM % 20 ))
    fi
    sleep 1
done
log "soak: time is up; waiting for the $(running_jobs) running job(s) to end"
for i in $(seq 300); do
    [ "$(running_jobs)" = 0 ] && break
    if [ "$i" = 60 ]; then # stuck? say what the head sees
        on head
        "${ON[@]}" "$KILN" fleet status --head "$CEP" --keys "$K" --timeout-s 5 ||
            log "the head does not answer"
    fi
    sleep 1
done
touch "$STOP"

# ---- the reckoning ----------------------------------------------------------
failed=0 results=0 lost=0 dups=0
for ((n = 0; n < NJOB; n++)); do
    res=$(cat "$W/job$n.result" 2>/dev/null || echo "failed: did not end")
    "$KILN" db export --db "$W/db$n" --out "$W/job$n.final" 2>/dev/null ||
        : >"$W/job$n.final"
    read -r have dup gone < <(python3 - "$W/job$n.final" "$W/job$n.kept" <<'P'
import json, os, sys
recs = [l for l in open(sys.argv[1]).read().splitlines() if '"type":"record"' in l]
pairs = [(r["workload_key"], r["trace_hash"]) for r in map(json.loads, recs)]
kept = set(open(sys.argv[2]).read().splitlines()) if os.path.exists(sys.argv[2]) else set()
print(len(recs), len(pairs) - len(set(pairs)), len(kept - set(recs)))
P
    )
    budget=$(cat "$W/job$n.budget")
    results=$((results + have))
    dups=$((dups + dup))
    lost=$((lost + gone))
    [ "$res" = ok ] && [ "$have" -lt "$budget" ] && lost=$((lost + budget - have))
    if [ "$res" != ok ] || [ "$have" != "$budget" ]; then
        failed=$((failed + 1))
        log "job$n: $res; $have of $budget records"
    fi
done
echo "soak: $MINUTES minute(s), $( [ "$NETNS" = 1 ] && echo "3 network namespaces" || echo loopback), ${#AGENTS[@]} agents (3 simulated, 1 real)"
echo "jobs run: $NJOB ($failed failed)"
echo "results: $results"
echo "faults injected: $(( FAULTS[agent-kill] + FAULTS[head-kill] + FAULTS[link-down] + FAULTS[client-kill] ))" \
    "(agent-kill ${FAULTS[agent-kill]}, head-kill ${FAULTS[head-kill]}," \
    "link-down ${FAULTS[link-down]}, client-kill ${FAULTS[client-kill]})"
echo "lost records: $lost"
echo "duplicates: $dups"
[ "$failed" = 0 ] && [ "$lost" = 0 ] && [ "$dups" = 0 ]
