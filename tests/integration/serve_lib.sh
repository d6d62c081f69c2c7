# Shared by the kiln serve tests (serve_fleet.sh, serve_netns.sh), sourced
# after lib.sh: the head's status read from `kiln fleet status --json`, jobs
# through kiln tune --fleet, the share two jobs get and their records.
# Needs K (the keys dir), AEP and CEP (the head's agents and clients
# endpoints) and OP. A test whose agents or clients run elsewhere redefines
# in_agent and in_client.

# in_client WHO: the words to put before a command run on the host of
# client WHO (a job's name, or "status"); here, none. (Words, not a wrapper
# function: a process started in the background must be that command, so
# that its pid is the one signalled.)
in_client() { :; }

# in_agent NAME: the words to put before a command run on agent NAME's
# host; here, none.
in_agent() { :; }

# agent NAME KEYNAME [more args]: a simulated kiln-agent (20 ms an answer)
# with the keys of KEYNAME, on the head's agents endpoint AEP; log in
# $T/agent-NAME.log, its pid in AGENT_PID.
agent() {
    local n=$1 key=$2
    shift 2
    local pre
    read -ra pre <<<"$(in_agent "$n")"
    "${pre[@]}" "$KILN_AGENT" --connect "$AEP" --keys "$K" --name "$key" \
        --coordinator-key "$K/coordinator.pub" --simulate --heartbeat-ms 500 \
        --simulate-ms 20 "$@" 2>"$T/agent-$n.log" &
    AGENT_PID=$!
    PIDS+=("$AGENT_PID")
}

status() {
    local pre
    read -ra pre <<<"$(in_client status)"
    "${pre[@]}" "$KILN" fleet status --head "$CEP" --keys "$K" --json "$@"
}
# jq-free readers of the status JSON.
njobs() { python3 -c 'import json,sys; print(len(json.load(sys.stdin)["jobs"]))'; }
nagents() { python3 -c 'import json,sys; print(len(json.load(sys.stdin)["agents"]))'; }
field() { # field agents|jobs NAME KEY
    python3 -c 'import json,sys
d=json.load(sys.stdin)
print(next((x[sys.argv[3]] for x in d[sys.argv[1]] if x["name"]==sys.argv[2]), "none"))' "$@"
}

tune() { # tune NAME TRIALS [more args]: in the background, sets TUNE_PID
    local n=$1 trials=$2
    shift 2
    local pre
    read -ra pre <<<"$(in_client "$n")"
    "${pre[@]}" "$KILN" tune --op "$OP" --simulate --strategy replay --seed 1 \
        --max-trials-per-task "$trials" --trials-per-iter 128 --db "$T/db-$n" \
        --fleet "$CEP" --keys "$K" --name "$n" "$@" \
        >"$T/$n.out" 2>"$T/$n.log" &
    TUNE_PID=$!
    PIDS+=("$TUNE_PID")
}

# going JOB... [MIN]: the head counts more than MIN (default 100) results
# of each JOB.
going() {
    local min=100 n
    [[ ${!#} =~ ^[0-9]+$ ]] && min=${!#} && set -- "${@:1:$#-1}"
    for n in "$@"; do
        [ "$(status | field jobs "$n" done)" -gt "$min" ] 2>/dev/null || return 1
    done
}

# finish JOB PID SECONDS: job JOB (pid PID) ends within SECONDS, exit 0.
finish() {
    wait_for "$3" bash -c "! kill -0 $2 2>/dev/null" ||
        fail "$1 did not end within $3 s: $(status)"
    wait "$2" || fail "job $1 exited $?"
}

# sample_pair A PA B PB FILE: while job A (pid PA) or B (pid PB) runs,
# appends the head's view of both ("doneA queuedA doneB queuedB") to FILE
# every 0.1 s, while both are listed.
sample_pair() {
    local A=$1 PA=$2 B=$3 PB=$4 out=$5
    : >"$out"
    while kill -0 "$PA" 2>/dev/null || kill -0 "$PB" 2>/dev/null; do
        status 2>/dev/null | python3 -c 'import json,sys
try:
    j={x["name"]: x for x in json.load(sys.stdin)["jobs"]}
except ValueError:
    sys.exit(0)  # no answer (the head away): no sample
a, b = sys.argv[1], sys.argv[2]
if a in j and b in j:
    print(j[a]["done"], j[a]["queued"], j[b]["done"], j[b]["queued"])' \
            "$A" "$B" >>"$out" || break
        sleep 0.1
    done
}

# check_share FILE A B LO HI: A's share of the results while both had work
# queued (from sample_pair's FILE) is within [LO, HI]. The results between
# two samples where both jobs had work waiting at the head, summed (a job
# between rounds, or one that started late, asks for less than its share).
check_share() {
    python3 - "$@" <<'PY' || fail "share of $2: $(cat "$1")"
import sys
rows = [tuple(map(int, l.split())) for l in open(sys.argv[1])]
da = db = 0
for p, q in zip(rows, rows[1:]):
    if p[1] > 0 and p[3] > 0 and q[1] > 0 and q[3] > 0 and q[0] >= p[0] and q[2] >= p[2]:
        da += q[0] - p[0]
        db += q[2] - p[2]
share = da / (da + db) if da + db else -1
print(f"share: {sys.argv[2]} {da} {sys.argv[3]} {db} results while both "
      f"had work queued: {100*share:.1f}% / {100-100*share:.1f}%")
assert da + db >= 100, (da, db)
assert float(sys.argv[4]) <= share <= float(sys.argv[5]), share
PY
}

# check_trials NAME N: job NAME said it ended with exactly N trials, none
# restored, and its store holds N records of N distinct traces (none lost,
# none twice).
check_trials() {
    local n=$1 want=$2
    grep -q "^trials *$want ($want valid, 0 restored" "$T/$n.out" ||
        fail "$n: $(grep ^trials "$T/$n.out")"
    "$KILN" db ls --db "$T/db-$n" >"$T/ls-$n.txt" || fail "db ls $n"
    grep -q "matmul_256_256_256 .* $want " "$T/ls-$n.txt" ||
        fail "$n's store: $(cat "$T/ls-$n.txt")"
    "$KILN" db export --db "$T/db-$n" --out "$T/export-$n.jsonl" ||
        fail "db export $n"
    python3 - "$T/export-$n.jsonl" "$want" "$n" <<'PY' || fail "$n's records"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"type":"record"' in l]
pairs = {(r["workload_key"], r["trace_hash"]) for r in recs}
print(f"{sys.argv[3]}: {len(recs)} records, {len(pairs)} distinct traces")
assert len(recs) == int(sys.argv[2]) == len(pairs), (len(recs), len(pairs))
PY
}

# pair A WA B WB LO HI [TRIALS]: jobs A (weight WA) and B (WB) of TRIALS
# (600) trials at once; each ends with exactly TRIALS in its own store, and
# A's share of the results while both ran, from the head's status, is
# within [LO, HI].
pair() {
    local A=$1 WA=$2 B=$3 WB=$4 lo=$5 hi=$6 trials=${7:-600}
    tune "$A" "$trials" --weight "$WA"
    local PA=$TUNE_PID
    tune "$B" "$trials" --weight "$WB"
    local PB=$TUNE_PID
    sample_pair "$A" "$PA" "$B" "$PB" "$T/samples-$A.txt"
    wait "$PA" || fail "job $A exited $?"
    wait "$PB" || fail "job $B exited $?"
    check_trials "$A" "$trials"
    check_trials "$B" "$trials"
    check_share "$T/samples-$A.txt" "$A" "$B" "$lo" "$hi"
}

# client_not_agent HEADLOG: a kiln-agent with the client key does not
# register (status does not list it) and the refusal is logged, by the head
# (HEADLOG) or by the agent.
client_not_agent() {
    agent client client
    sleep 2
    [ "$(status | field agents client name)" = none ] ||
        fail "a client key registered as an agent: $(status)"
    grep -q "refused" "$1" || grep -qi "denied\|refused" "$T/agent-client.log" ||
        fail "no refusal logged"
    kill -TERM "$AGENT_PID"
}
