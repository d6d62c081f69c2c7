#!/usr/bin/env bash
# tools/deploy/slurm/kiln-agents.sbatch on a real one-node Slurm (Debian's
# slurmctld + slurmd + munge, started here with a config, a munge key and
# a socket of this test's own, no system service touched). A kiln tune
# head waits on loopback with no agent; the batch job starts the node's
# agents (KILN_HEAD from a config file, the environment winning over it
# for KILN_KEYS; the CPU agent named <host>-cpu, its keypair made by the
# script and admitted by the head while it runs); the tuning job ends with its
# exact trial count, every record measured by that agent. scancel stops
# the agents: their processes are gone and the Slurm job is no longer
# listed. SKIP only where the Slurm/munge packages are absent (tools/
# setup.sh installs them) or the test is not root.
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
for b in munged mungekey slurmctld slurmd sinfo sbatch squeue scancel; do
    command -v "$b" >/dev/null || PATH=$PATH:/usr/sbin:/sbin
    command -v "$b" >/dev/null ||
        { echo "SKIP: $b not installed (tools/setup.sh installs slurmctld slurmd slurm-client munge)"; exit 77; }
done
[ "$(id -u)" -eq 0 ] || { echo "SKIP: slurmd must run as root here"; exit 77; }

# Daemons and the jobs are stopped before lib.sh's cleanup removes $T.
S=$T/slurm
mkdir -p "$S/state" "$S/spool" "$S/munge"
chmod 0755 "$T" "$S" "$S/munge"
export SLURM_CONF=$S/slurm.conf
stop_all() {
    [ -f "$S/jobid" ] && scancel "$(cat "$S/jobid")" 2>/dev/null
    for pf in "$S/slurmd.pid" "$S/slurmctld.pid" "$S/munged.pid"; do
        [ -f "$pf" ] || continue
        local p
        p=$(cat "$pf")
        kill -TERM "$p" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null
    done
    # Agents a failed run left behind (this test's binary and keys only).
    local left
    left=$(pgrep -f "^$KILN_AGENT --connect .* --keys $T/")
    [ -n "$left" ] && kill -KILL $left 2>/dev/null
    cleanup
}
trap stop_all EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# munge: its own key and socket.
mungekey -c -k "$S/munge/munge.key" 2>"$S/mungekey.log" ||
    dd if=/dev/urandom of="$S/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 0400 "$S/munge/munge.key"
sock=$S/munge/munge.socket
munged -f --socket="$sock" --key-file="$S/munge/munge.key" \
    --pid-file="$S/munged.pid" --log-file="$S/munged.log" \
    --seed-file="$S/munge/seed" 2>"$T/munged.log" || fail "munged did not start"
wait_for 10 test -S "$sock" || fail "no munge socket"

cpus=$(nproc)
mem=$(awk '/MemTotal/ { print int($2 / 1024 / 2) }' /proc/meminfo)
cat >"$SLURM_CONF" <<C
ClusterName=kilntest
SlurmctldHost=localhost
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
KillWait=5
SlurmdTimeout=30
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
C
slurmctld -D -i >"$T/slurmctld.log" 2>&1 &
PIDS+=($!)
slurmd -D -N localhost >"$T/slurmd.log" 2>&1 &
PIDS+=($!)
node_idle() { [ "$(sinfo -h -n localhost -o %t 2>/dev/null)" = idle ]; }
wait_for 60 node_idle || { sinfo; tail "$S/slurmctld.log" "$S/slurmd.log"; fail "the node is not idle in 60 s"; }

# The head: kiln tune, no agent of its own, waiting for Slurm's.
"$KILN" keygen "$T/keys" coordinator >/dev/null || fail keygen
mkdir -p "$T/keys/agents"
cat >"$T/tiny.graph" <<'G'
model tiny
input x 1x8x16x16
c = conv2d x K=8 R=3 pad=1 bias=1
r = relu c
p = max_pool2d r R=2
f = flatten p
d = dense f O=32
G
"$KILN" tune --model "$T/tiny.graph" --listen 'tcp://127.0.0.1:*' \
    --keys "$T/keys" --agent-wait-s 120 --max-trials-global 6 \
    --trials-per-iter 3 --db "$T/db" --seed 1 --strategy replay --quiet \
    --repeat 3 --min-repeat-ms 0 --timeout-ms 5000 --no-flush \
    >"$T/tune.out" 2>"$T/tune.log" &
head_pid=$!
PIDS+=("$head_pid")
wait_for 20 grep -q "listening on" "$T/tune.log" || fail "the head did not bind"
ep=$(sed -n 's/.*listening on \(tcp:[^ ]*\).*/\1/p' "$T/tune.log" | head -1)
[ -n "$ep" ] || fail "no endpoint in the head's log"

# The fleet, as an operator submits it: the head's endpoint from the
# config file the systemd units read too, the rest from the environment.
cd "$T" || fail "cd $T"
printf 'KILN_HEAD=%s\nKILN_KEYS=/nonexistent\n' "$ep" >"$T/agent.env"
env -u KILN_HEAD KILN_KEYS="$T/keys" KILN_AGENT="$KILN_AGENT" KILN="$KILN" \
    KILN_CONFIG="$T/agent.env" \
    sbatch --parsable --output="$T/job.out" "$root/tools/deploy/slurm/kiln-agents.sbatch" \
    >"$S/jobid" 2>"$T/sbatch.log" || fail "sbatch: $(cat "$T/sbatch.log")"
job=$(cut -d';' -f1 "$S/jobid")
echo "$job" >"$S/jobid"
running() { [ "$(squeue -h -j "$job" -o %T 2>/dev/null)" = RUNNING ]; }
wait_for 60 running || fail "job $job is not running: $(squeue -j "$job")"

wait "$head_pid"
rc=$?
[ "$rc" -eq 0 ] || { cat "$T/job.out"; fail "kiln tune exited $rc"; }
grep -q "^Total trials: 6$" "$T/tune.out" || fail "the summary is not 6 trials"
host=$(hostname -s)
n=$("$KILN" db ls --db "$T/db" | awk 'NR > 1 { n += $(NF - 3) } END { print n + 0 }')
[ "$n" -eq 6 ] || fail "the store holds $n records, expected 6"
"$KILN" db export --db "$T/db" >"$T/export.json" || fail "kiln db export"
python3 - "$T/export.json" "$host-cpu" <<'P' || fail "records not measured by $host-cpu"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
recs = [r for r in lines if r["type"] == "record"]
agents = {r.get("agent") for r in recs}
print("records:", len(recs), "agents:", agents)
sys.exit(0 if len(recs) == 6 and agents == {sys.argv[2]} else 1)
P
[ -f "$T/keys/agents/$host-cpu.pub" ] || fail "the script did not admit its agent's key"
grep -q "starting agent $host-cpu (--device cpu)" "$T/job.out" ||
    fail "the job's output does not name its CPU agent"

# The agents outlive the tuning job; scancel ends them.
agent_pids() { pgrep -f "^$KILN_AGENT --connect $ep "; }
[ -n "$(agent_pids)" ] || fail "no agent process while the job runs"
running || fail "the Slurm job ended with the tuning job"
scancel "$job" || fail "scancel $job"
gone() { [ -z "$(agent_pids)" ] && [ -z "$(squeue -h -j "$job" 2>/dev/null)" ]; }
wait_for 60 gone || fail "agents still running 60 s after scancel: $(agent_pids)"
rm -f "$S/jobid"
echo PASS
