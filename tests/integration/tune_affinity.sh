#!/usr/bin/env bash
# kiln links libgomp, which binds its initial thread to one CPU when it
# loads under OMP_PROC_BIND. kiln tune undoes that before it forks its local
# agents: with OMP_PROC_BIND=close set, every agent (and so every kernel it
# measures) may still use all the CPUs this script may use.
. "$(dirname "$0")/lib.sh"
want=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
[ "$(nproc)" -ge 2 ] || { echo "SKIP: one CPU, nothing to tell apart"; exit 77; }
OMP_PROC_BIND=close OMP_NUM_THREADS=2 "$KILN" tune --op "matmul M=64 N=64 K=64" \
    --strategy replay --max-trials-per-task 8 --trials-per-iter 8 \
    --db "$T/db" --seed 1 --repeat 3 --min-repeat-ms 200 --no-flush \
    >"$T/out.txt" 2>"$T/tune.log" &
PIDS+=($!)
seen=0
for _ in $(seq 200); do
    for p in $(pgrep -P "${PIDS[0]}" -f kiln-agent); do
        got=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "/proc/$p/status" 2>/dev/null)
        [ -n "$got" ] || continue
        seen=1
        [ "$got" = "$want" ] || fail "agent $p may use CPUs $got, not $want"
    done
    [ "$seen" = 1 ] && break
    sleep 0.05
done
[ "$seen" = 1 ] || fail "no agent process seen"
wait "${PIDS[0]}" || fail "kiln tune exited $?"
grep -q "^best .* us" "$T/out.txt" || fail "no best latency"
echo "PASS: agents may use CPUs $want under OMP_PROC_BIND=close"
