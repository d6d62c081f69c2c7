#!/usr/bin/env bash
# kiln tune --http: /metrics and / on a real job (one real kiln-agent, real
# compiles and timings). /metrics must parse as the Prometheus text format
# (metrics_check.py, a strict parser of its grammar) while the job runs and
# at its end, and its counters must equal what `kiln db export` shows of
# the store: results by status, trials and valid trials per task, the best
# latency, the store's size. Then a resumed run (restored records), a model
# run (three tasks), and the --http errors: a bad value, a port in use, a
# non-loopback address (served, with a notice).
. "$(dirname "$0")/lib.sh"
CHECK=(python3 "$(dirname "$0")/metrics_check.py")
TEVAL=(--repeat 3 --min-repeat-ms 0 --timeout-ms 5000 --no-flush)
OP="matmul M=64 N=64 K=64"

"${CHECK[@]}" selftest >"$T/selftest.log" 2>&1 ||
    fail "the checker accepts broken input: $(cat "$T/selftest.log")"

# start_tune NAME ARGS...: kiln tune in the background (log $T/NAME.log);
# sets TUNE_PID and URL (http://HOST:PORT) from its "metrics on" line.
start_tune() {
    local name=$1
    shift
    "$KILN" tune "$@" >"$T/$name.out" 2>"$T/$name.log" &
    TUNE_PID=$!
    PIDS+=("$TUNE_PID")
    wait_for 30 grep -q "^kiln tune: metrics on http" "$T/$name.log" ||
        fail "$name: no metrics URL"
    URL=$(sed -n 's|^kiln tune: metrics on \(http://.*\)/metrics$|\1|p' \
        "$T/$name.log" | head -1)
}

# final NAME: polls /metrics (5 per second, up to 120 s) until the job
# says it is done; the last scrape is $T/NAME.prom.
final() {
    for _ in $(seq 600); do
        curl -sf "$URL/metrics" -o "$T/$1.prom" || fail "$1: GET /metrics"
        grep -qx "kiln_job_done 1" "$T/$1.prom" && return 0
        sleep 0.2
    done
    fail "$1: the job did not end within 120 s"
}

# stop NAME: SIGTERM ends the linger; the job's exit code must be 0.
stop() {
    kill -TERM "$TUNE_PID"
    wait "$TUNE_PID"
    local rc=$?
    [ "$rc" -eq 0 ] || fail "$1: kiln tune exited $rc"
}

# compare NAME DB [RESTORED]: the final scrape against the store.
compare() {
    "$KILN" db export --db "$2" >"$T/$1.jsonl" || fail "$1: kiln db export"
    "${CHECK[@]}" compare "$T/$1.prom" "$T/$1.jsonl" "$2" ${3:+--restored $3} \
        >"$T/$1.cmp" 2>&1 || fail "$1: $(cat "$T/$1.cmp")"
}

# -- one operator, fresh store: 8 trials in batches of 4 -----------------
start_tune op --op "$OP" --strategy replay --max-trials-per-task 8 \
    --trials-per-iter 4 --db "$T/db" --seed 1 "${TEVAL[@]}" \
    --http 127.0.0.1:0 --http-linger 120
case "$URL" in http://127.0.0.1:[0-9]*) ;; *) fail "op: URL '$URL'" ;; esac
curl -sf -D "$T/op.hdr" "$URL/metrics" -o "$T/op_live.prom" || fail "GET live"
grep -qi "^content-type: text/plain; version=0.0.4" "$T/op.hdr" ||
    fail "op: /metrics content type: $(grep -i content-type "$T/op.hdr")"
"${CHECK[@]}" lint "$T/op_live.prom" >"$T/lint.log" 2>&1 ||
    fail "op: live /metrics: $(cat "$T/lint.log")"
curl -sf "$URL/" -o "$T/op.html" || fail "op: GET /"
grep -q '<meta http-equiv="refresh" content="2">' "$T/op.html" ||
    fail "op: the status page does not refresh itself"
grep -q "matmul_64_64_64" "$T/op.html" || fail "op: no task in the page"
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/nope")
[ "$code" = 404 ] || fail "op: /nope answered $code"
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$URL/metrics")
[ "$code" = 405 ] || fail "op: POST answered $code"
final op
compare op "$T/db"
grep -q '^kiln_task_trials{task="0",workload="matmul_64_64_64"} 8$' \
    "$T/op.prom" || fail "op: task trials are not 8"

# While that job lingers, its port is taken: a second job must say so.
port=${URL##*:}
"$KILN" tune --op "$OP" --max-trials-per-task 1 --db "$T/db_busy" \
    --http "127.0.0.1:$port" >/dev/null 2>"$T/busy.log"
rc=$?
[ "$rc" -eq 1 ] || fail "a port in use: exit $rc, expected 1"
grep -q "cannot serve on 127.0.0.1 port $port" "$T/busy.log" ||
    fail "a port in use: $(cat "$T/busy.log")"
stop op

# -- the same store, cap 12: 8 restored, 4 new; bare port form ------------
start_tune resume --op "$OP" --strategy replay --max-trials-per-task 12 \
    --trials-per-iter 4 --db "$T/db" --seed 2 "${TEVAL[@]}" \
    --http 0 --http-linger 120
case "$URL" in http://127.0.0.1:[0-9]*) ;; *) fail "resume: URL '$URL'" ;; esac
final resume
compare resume "$T/db" 8
grep -q '^kiln_task_restored_trials{task="0",workload="matmul_64_64_64"} 8$' \
    "$T/resume.prom" || fail "resume: 8 restored trials not shown"
stop resume

# -- a model: three tasks, 6 trials ---------------------------------------
cat >"$T/tiny.graph" <<'G'
model tiny
input x 1x8x16x16
c = conv2d x K=8 R=3 pad=1 bias=1
r = relu c
p = max_pool2d r R=2
f = flatten p
d = dense f O=32
G
start_tune model --model "$T/tiny.graph" --max-trials-global 6 \
    --trials-per-iter 2 --scheduler round-robin --strategy replay \
    --db "$T/dbm" --quiet "${TEVAL[@]}" --http 127.0.0.1:0 --http-linger 120
final model
compare model "$T/dbm"
[ "$(grep -c '^kiln_task_trials{' "$T/model.prom")" -eq 3 ] ||
    fail "model: not 3 tasks in /metrics"
grep -q '^kiln_job_info{job="tiny"} 1$' "$T/model.prom" || fail "model: job"
stop model

# -- usage errors and a non-loopback address -------------------------------
for bad in 99999 "127.0.0.1:x" "::1:9100" "[::1:9100" ""; do
    "$KILN" tune --op "$OP" --db "$T/db" --http "$bad" >/dev/null \
        2>"$T/bad.log"
    rc=$?
    [ "$rc" -eq 2 ] || fail "--http '$bad': exit $rc, expected 2"
    grep -q -- "--http" "$T/bad.log" || fail "--http '$bad': $(cat "$T/bad.log")"
done
# The task is done at start (cap 8 < 12 records): nothing runs, the
# server starts and stops; a non-loopback address is served with a notice.
"$KILN" tune --op "$OP" --max-trials-per-task 8 --db "$T/db" \
    --http 0.0.0.0:0 >/dev/null 2>"$T/any.log" || fail "0.0.0.0: exit $?"
grep -q "non-loopback address" "$T/any.log" || fail "no notice for 0.0.0.0"
echo PASS
