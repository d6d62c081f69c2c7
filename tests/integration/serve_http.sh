#!/usr/bin/env bash
# kiln serve --http and --state: one head (--insecure, loopback), two
# simulated kiln-agents (20 ms an answer), jobs through kiln tune --fleet:
#  1. /metrics parses as the Prometheus text format (metrics_check.py lint:
#     every line, HELP and TYPE of every family) and has the series of both
#     agents; / is the status page with both agents; /nope is 404;
#  2. a job of 300 trials: its results_total grows while it runs and
#     never goes back, `kiln fleet status` says "running"; at its end it is
#     gone from the jobs and the head forwarded exactly 300 results, which
#     the two agents' results_total add up to;
#  3. a job for a target no agent has (sim/cuda/sm_90): waiting_for_agents
#     1, and `kiln fleet status` says "waiting for an agent of target ...";
#  4. --state: a0 drained, the head restarted (SIGTERM) with the same
#     --state: the agents reconnect, a0 is still drained and a job's work
#     goes to a1 only; undrained, DIR/drained is empty again;
#  5. --http errors: a bad value exits 2, a port in use exits 1.
. "$(dirname "$0")/lib.sh"
CHECK=(python3 "$(dirname "$0")/metrics_check.py")
OP="matmul M=256 N=256 K=256"
ST="$T/state"

# start_head LOG AGENTS_EP CLIENTS_EP: kiln serve in the background; sets
# SERVE_PID, URL (http://HOST:PORT), AEP and CEP.
start_head() {
    KILN_LOG=info "$KILN" serve --agents "$2" --clients "$3" --insecure \
        --http 127.0.0.1:0 --state "$ST" --client-timeout-s 5 2>"$T/$1" &
    SERVE_PID=$!
    PIDS+=("$SERVE_PID")
    wait_for 10 grep -q "jobs on" "$T/$1" || fail "kiln serve did not bind"
    URL=$(sed -n 's|^kiln serve: metrics on \(http://.*\)/metrics$|\1|p' "$T/$1")
    AEP=$(sed -n 's/.*agents on \(tcp:[^,]*\), jobs on \(tcp:.*\)$/\1/p' "$T/$1")
    CEP=$(sed -n 's/.*agents on \(tcp:[^,]*\), jobs on \(tcp:.*\)$/\2/p' "$T/$1")
    case "$URL" in http://127.0.0.1:[0-9]*) ;; *) fail "metrics URL '$URL'" ;; esac
    [ -n "$AEP" ] && [ -n "$CEP" ] || fail "endpoints: $(cat "$T/$1")"
}
status() { "$KILN" fleet status --head "$CEP" --insecure "$@" 2>/dev/null; }
field() { # field agents|jobs NAME KEY (status JSON on stdin)
    python3 -c 'import json,sys
d=json.load(sys.stdin)
print(next((x[sys.argv[3]] for x in d[sys.argv[1]] if x["name"]==sys.argv[2]), "none"))' "$@"
}
scrape() { curl -sf "$URL/metrics" -o "$T/$1.prom" || fail "GET /metrics ($1)"; }
# value FILE SERIES: the value of one exact series line, or "none".
value() { awk -v s="$2" '$1 == s {print $2; f=1} END {if (!f) print "none"}' "$1"; }

start_head serve.log 'tcp://127.0.0.1:*' 'tcp://127.0.0.1:*'
[ -f "$ST/drained" ] && [ ! -s "$ST/drained" ] || fail "--state: no empty $ST/drained"
for a in a0 a1; do
    "$KILN_AGENT" --connect "$AEP" --insecure --name $a --simulate \
        --simulate-ms 20 --heartbeat-ms 500 2>"$T/agent-$a.log" &
    PIDS+=("$!")
done
two_agents() {
    [ "$(status --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["agents"]))')" = 2 ]
}
wait_for 15 two_agents || fail "the two agents did not register: $(status)"

# ---- 1. the pages ----
sleep 0.3 # one publish (every 0.25 s) after the agents registered
curl -sf -D "$T/m.hdr" "$URL/metrics" -o "$T/idle.prom" || fail "GET /metrics"
grep -qi "^content-type: text/plain; version=0.0.4" "$T/m.hdr" ||
    fail "/metrics content type: $(grep -i content-type "$T/m.hdr")"
"${CHECK[@]}" lint "$T/idle.prom" >"$T/lint.log" 2>&1 ||
    fail "/metrics: $(cat "$T/lint.log")"
[ "$(value "$T/idle.prom" kiln_serve_agents_connected)" = 2 ] ||
    fail "agents_connected: $(grep agents_connected "$T/idle.prom")"
for a in a0 a1; do
    grep -q "^kiln_serve_agent_info{agent=\"$a\",host=\"[^\"]*\",target=\"sim/cpu/[^\"]*\"} 1$" \
        "$T/idle.prom" || fail "no agent_info of $a"
    for f in busy build_slots results_total failures_total drained last_seen_seconds; do
        [ "$(value "$T/idle.prom" "kiln_serve_agent_$f{agent=\"$a\"}")" != none ] ||
            fail "no kiln_serve_agent_$f of $a"
    done
    [ "$(value "$T/idle.prom" "kiln_serve_agent_drained{agent=\"$a\"}")" = 0 ] ||
        fail "$a drained at start"
done
[ "$(value "$T/idle.prom" kiln_serve_jobs)" = 0 ] || fail "jobs at start"
curl -sf "$URL/" -o "$T/page.html" || fail "GET /"
grep -q '<meta http-equiv="refresh" content="2">' "$T/page.html" ||
    fail "the status page does not reload itself"
for a in a0 a1; do
    grep -q "<td class=\"l\">$a</td>" "$T/page.html" || fail "$a not on the page"
done
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/nope")
[ "$code" = 404 ] || fail "/nope answered $code"

# ---- 2. a job of 300 trials ----
"$KILN" tune --op "$OP" --simulate --strategy replay --seed 1 \
    --max-trials-per-task 300 --trials-per-iter 128 --db "$T/db-jr" \
    --fleet "$CEP" --insecure --name jr >"$T/jr.out" 2>"$T/jr.log" &
PJ=$!
PIDS+=("$PJ")
: >"$T/samples.txt"
: >"$T/states.txt"
while kill -0 "$PJ" 2>/dev/null; do
    scrape run
    value "$T/run.prom" 'kiln_serve_job_results_total{job="jr"}' >>"$T/samples.txt"
    status --json | field jobs jr state >>"$T/states.txt"
    sleep 0.2
done
wait "$PJ" || fail "job jr exited $?"
grep -q "^trials *300 (300 valid" "$T/jr.out" || fail "jr: $(grep ^trials "$T/jr.out")"
python3 - "$T/samples.txt" <<'PY' || fail "jr's results_total: $(tr '\n' ' ' <"$T/samples.txt")"
import sys
v = [float(l) for l in open(sys.argv[1]) if l.strip() not in ("", "none")]
print("jr results_total samples:", v)
assert len(set(v)) >= 3, "did not grow while it ran"
assert all(a <= b for a, b in zip(v, v[1:])), "went back"
assert 0 < v[-1] <= 300
PY
grep -qx running "$T/states.txt" || fail "jr never 'running': $(sort -u "$T/states.txt")"
sleep 0.3
scrape after
"${CHECK[@]}" lint "$T/after.prom" >"$T/lint.log" 2>&1 || fail "/metrics: $(cat "$T/lint.log")"
[ "$(value "$T/after.prom" kiln_serve_jobs)" = 0 ] || fail "jr still listed"
! grep -q 'job="jr"' "$T/after.prom" || fail "jr's series still there"
[ "$(value "$T/after.prom" kiln_serve_results_forwarded_total)" = 300 ] ||
    fail "forwarded: $(grep forwarded_total "$T/after.prom")"
[ "$(value "$T/after.prom" kiln_serve_jobs_seen_total)" = 1 ] || fail "jobs_seen_total"
[ "$(value "$T/after.prom" kiln_serve_requests_received_total)" -ge 3 ] ||
    fail "requests_received_total: $(grep requests_received "$T/after.prom")"
# The agents' counters are read from dispatch at least every second.
agents_sum() {
    scrape after
    r0=$(value "$T/after.prom" 'kiln_serve_agent_results_total{agent="a0"}')
    r1=$(value "$T/after.prom" 'kiln_serve_agent_results_total{agent="a1"}')
    [ $((r0 + r1)) -eq 300 ]
}
wait_for 5 agents_sum && [ "$r0" -gt 0 ] && [ "$r1" -gt 0 ] ||
    fail "agents' results: a0 $r0, a1 $r1"

# ---- 3. a job no agent can serve ----
"$KILN" tune --op "$OP" --target cuda/sm_90 --simulate --strategy replay \
    --max-trials-per-task 20 --db "$T/db-jw" --fleet "$CEP" --insecure \
    --name jw --agent-wait-s 60 >"$T/jw.out" 2>"$T/jw.log" &
PW=$!
PIDS+=("$PW")
waiting() {
    scrape wait
    [ "$(value "$T/wait.prom" 'kiln_serve_job_waiting_for_agents{job="jw"}')" = 1 ]
}
wait_for 20 waiting || fail "jw not waiting: $(grep 'jw' "$T/wait.prom")"
"${CHECK[@]}" lint "$T/wait.prom" >"$T/lint.log" 2>&1 || fail "/metrics: $(cat "$T/lint.log")"
grep -q '^kiln_serve_job_info{job="jw",owner_key="",target="sim/cuda/sm_90"} 1$' \
    "$T/wait.prom" || fail "jw's job_info: $(grep job_info "$T/wait.prom")"
status >"$T/status.txt" || fail "kiln fleet status exited $?"
grep -q "^jw .*waiting for an agent of target sim/cuda/sm_90$" "$T/status.txt" ||
    fail "status does not say jw waits: $(cat "$T/status.txt")"
[ "$(status --json | field jobs jw waiting_target)" = sim/cuda/sm_90 ] ||
    fail "JSON waiting_target: $(status --json)"
curl -sf "$URL/" | grep -q "waiting for an agent of target sim/cuda/sm_90" ||
    fail "the page does not say jw waits"
kill -TERM "$PW"
wait "$PW" 2>/dev/null
gone() { [ "$(status --json | field jobs jw name)" = none ]; }
wait_for 10 gone || fail "jw still listed: $(status)"

# ---- 4. --state: a drain outlives the head ----
"$KILN" fleet drain a0 --head "$CEP" --insecure >/dev/null 2>&1 || fail "drain a0"
[ "$(cat "$ST/drained")" = a0 ] || fail "$ST/drained: $(cat "$ST/drained")"
[ ! -e "$ST/drained.tmp" ] || fail "drained.tmp left behind"
kill -TERM "$SERVE_PID"
wait "$SERVE_PID" || fail "kiln serve exited $? on SIGTERM"
start_head serve2.log "$AEP" "$CEP"
wait_for 20 two_agents || fail "the agents did not reconnect: $(status)"
grep -q "drained as they register" "$T/serve2.log" || fail "no state read"
a0_drained() { [ "$(status --json | field agents a0 drained)" = True ]; }
wait_for 5 a0_drained || fail "a0 not drained after the restart: $(status)"
[ "$(status --json | field agents a1 drained)" = False ] || fail "a1 drained"
sleep 0.3
scrape restarted
[ "$(value "$T/restarted.prom" 'kiln_serve_agent_drained{agent="a0"}')" = 1 ] ||
    fail "metrics: a0 not drained"
"$KILN" tune --op "$OP" --simulate --strategy replay --seed 2 \
    --max-trials-per-task 40 --db "$T/db-jd" --fleet "$CEP" --insecure \
    --name jd >"$T/jd.out" 2>"$T/jd.log" || fail "job jd exited $?"
grep -q "^trials *40 (40 valid" "$T/jd.out" || fail "jd: $(grep ^trials "$T/jd.out")"
[ "$(status --json | field agents a0 results)" = 0 ] ||
    fail "drained a0 measured: $(status)"
[ "$(status --json | field agents a1 results)" = 40 ] || fail "a1: $(status)"
"$KILN" fleet undrain a0 --head "$CEP" --insecure >/dev/null 2>&1 || fail "undrain a0"
[ ! -s "$ST/drained" ] || fail "undrained, $ST/drained still holds $(cat "$ST/drained")"
[ "$(status --json | field agents a0 drained)" = False ] || fail "a0 still drained"

# ---- 5. --http errors: a bad value exits 2, a port in use 1 ----
"$KILN" serve --agents 'tcp://127.0.0.1:*' --clients 'tcp://127.0.0.1:*' \
    --insecure --http 127.0.0.1:x 2>"$T/bad.txt"
rc=$?
[ "$rc" -eq 2 ] || fail "--http 127.0.0.1:x: exit $rc, expected 2"
grep -q -- "--http" "$T/bad.txt" || fail "bad --http: $(cat "$T/bad.txt")"
"$KILN" serve --agents 'tcp://127.0.0.1:*' --clients 'tcp://127.0.0.1:*' \
    --insecure --http "127.0.0.1:${URL##*:}" 2>"$T/busy.txt"
rc=$?
[ "$rc" -eq 1 ] || fail "--http on a port in use: exit $rc, expected 1"
grep -q "cannot serve on 127.0.0.1 port ${URL##*:}" "$T/busy.txt" ||
    fail "port in use: $(cat "$T/busy.txt")"

kill -TERM "$SERVE_PID"
wait "$SERVE_PID" || fail "kiln serve exited $? on SIGTERM"
echo PASS
