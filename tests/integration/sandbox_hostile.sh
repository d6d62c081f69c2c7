#!/usr/bin/env bash
# Hostile tenants against a real kiln-agent (CURVE, its own key pair and
# work directory): one candidate per attack, each also computing the right
# answer, measured by `kiln measure --listen` with a record store. Each
# attack must fail: the side effect is absent, the agent's secret key and
# environment appear nowhere (JSON, store, stolen-data reports), no process
# is left, no cached shared object changed, no forged timing is stored as
# valid, and the agent, alive after all of them (same pid), measures the
# honest candidate between every two attacks. Needs bubblewrap: without a
# sandbox (bwrap missing, user namespaces off) it is skipped (exit 77).
. "$(dirname "$0")/lib.sh"
N=64
ARGS="A:f32[$N,$N] B:f32[$N,$N] C:f32[$N,$N]:out"
H="$T/h"
mkdir -p "$H" "$T/work"
MARK="kiln-env-marker-$$-$RANDOM"

K="$T/keys"
"$KILN" keygen "$K" coordinator >/dev/null || fail "keygen coordinator"
"$KILN" keygen "$K" a0 --agent-key >/dev/null || fail "keygen a0"
SECRET=$(head -1 "$K/a0.key" | tr -d '\n')
[ -n "$SECRET" ] || fail "cannot read the agent's secret key for the checks"

# A listener on loopback that notes every connection it accepts.
python3 - "$T/port" "$T/conns" <<'PY' &
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(8)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
s.settimeout(120)
try:
    while True:
        c, _ = s.accept(); open(sys.argv[2], "a").write("connected\n"); c.close()
except Exception:
    pass
PY
PIDS+=("$!")
wait_for 10 test -s "$T/port" || fail "no loopback listener"
PORT=$(cat "$T/port")

# Every candidate: C = A x B, plus hostile() on its first call (or on the
# timed calls with -DLATER). leak() sends what it got where a result
# would go: to every descriptor, as a harness message and as text.
cat >"$H/common.h" <<C
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>
#define N $N
static void hostile(void);
static void leak(const char *what, const char *data)
{
    struct {
        uint32_t magic, kind, status, code, number, pad;
        double t_c, t_w, u, wall, child_s;
        char msg[1024];
    } m = {0x6b6c6a32u, 1, 1, 0, 1, 0, 1e-9, 0, 0, 0, 0, {0}};
    snprintf(m.msg, sizeof m.msg, "LEAK %s: %s", what, data);
    for (int fd = 0; fd < 64; fd++) {
        send(fd, &m, sizeof m, MSG_DONTWAIT | MSG_NOSIGNAL);
        (void)!write(fd, m.msg, strlen(m.msg));
    }
}
static int slurp(const char *path, char *buf, size_t n)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t k = read(fd, buf, n - 1);
    close(fd);
    buf[k > 0 ? k : 0] = 0;
    for (ssize_t i = 0; i < k; i++)
        if (!buf[i])
            buf[i] = ' ';
    return (int)k;
}
static int calls;
void kernel(void *const *args)
{
    const float *A = args[0], *B = args[1];
    float *Cm = args[2];
#ifdef LATER
    if (calls++ >= 1)
        hostile();
#else
    if (calls++ == 0)
        hostile();
#endif
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            float s = 0;
            for (int k = 0; k < N; k++)
                s += A[i * N + k] * B[k * N + j];
            Cm[i * N + j] = s;
        }
}
C
# The honest one: the same kernel with hostile() a no-op statement (an
# empty one would leave the `if` guarding the loops: a kernel that
# computes only on its first call).
ref() { sed -e 's/hostile();/(void)0;/' -e 's/static void hostile(void);//' "$H/common.h"; }
ref >"$H/ref.c"
cp "$H/ref.c" "$H/honest.c"

hostile() { # NAME BODY...: a candidate NAME.c whose hostile() is BODY
    local name=$1; shift
    { cat "$H/common.h"; printf 'static void hostile(void)\n{\n%s\n}\n' "$*"; } >"$H/$name.c"
}

# 1. The agent's secret key: by its path (from the agent's command line
# in /proc), and from every process's command line and environment.
hostile key "
    char buf[4096], path[512];
    snprintf(path, sizeof path, \"%s\", \"$K/a0.key\");
    if (slurp(path, buf, sizeof buf) > 0) leak(\"key\", buf);
    DIR *d = opendir(\"/proc\");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        snprintf(path, sizeof path, \"/proc/%s/cmdline\", e->d_name);
        if (slurp(path, buf, sizeof buf) > 0) leak(\"cmdline\", buf);
        snprintf(path, sizeof path, \"/proc/%s/environ\", e->d_name);
        if (slurp(path, buf, sizeof buf) > 0) leak(\"environ\", buf);
    }
    int pp = getppid();
    snprintf(path, sizeof path, \"/proc/%d/cmdline\", pp);
    if (slurp(path, buf, sizeof buf) > 0) leak(\"ppid\", buf);"
# 2. A file outside the build directory (the test's own directory, /tmp).
hostile write "
    int fd = open(\"$T/written-outside\", O_CREAT | O_WRONLY, 0644);
    if (fd >= 0) { (void)!write(fd, \"x\", 1); close(fd); }
    fd = open(\"/tmp/kiln-hostile-$$\", O_CREAT | O_WRONLY, 0644);
    if (fd >= 0) close(fd);"
# 3. A TCP connection to the listener on loopback.
hostile tcp "
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons($PORT)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s >= 0) connect(s, (struct sockaddr *)&a, sizeof a);"
# 4. A shell.
hostile exec "
    char *argv[] = {\"/bin/sh\", \"-c\", \"touch $T/exec-ran\", NULL};
    execve(\"/bin/sh\", argv, NULL);"
# 5. Fork away and outlive the measurement.
hostile fork "
    if (fork() == 0) {
        if (fork() == 0) {
            setsid();
            prctl(15 /* PR_SET_NAME */, \"kiln-evil-fork\");
            sleep(3);
            int fd = open(\"$T/fork-alive\", O_CREAT | O_WRONLY, 0644);
            if (fd >= 0) close(fd);
            sleep(60);
        }
        _exit(0);
    }"
sed -i 's/#include <unistd.h>/#include <unistd.h>\n#include <sys\/prctl.h>/' "$H/fork.c"
# 6. Kill the agent: the parent, every process it can see, everyone.
hostile kill "
    kill(getppid(), SIGKILL);
    DIR *d = opendir(\"/proc\");
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (atoi(e->d_name) > 0 && atoi(e->d_name) != getpid())
            kill(atoi(e->d_name), SIGKILL);
    kill(-1, SIGKILL);"
# 7. ptrace and the memory of every other process.
hostile ptrace "
    char path[64], buf[256];
    DIR *d = opendir(\"/proc\");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int pid = atoi(e->d_name);
        if (pid <= 0 || pid == getpid()) continue;
        if (ptrace(PTRACE_ATTACH, pid, 0, 0) == 0) leak(\"ptrace\", e->d_name);
        snprintf(path, sizeof path, \"/proc/%d/mem\", pid);
        int fd = open(path, O_RDWR);
        if (fd >= 0) { leak(\"mem\", e->d_name); close(fd); }
        snprintf(path, sizeof path, \"/proc/%d/environ\", pid);
        if (slurp(path, buf, sizeof buf) > 0) leak(\"environ\", buf);
    }"
# 8. Overwrite the agent's other cached shared objects with its own code.
hostile cache "
    DIR *d = opendir(\"$T/work\");
    struct dirent *e;
    char path[1024];
    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 4 || strcmp(e->d_name + n - 3, \".so\")) continue;
        snprintf(path, sizeof path, \"$T/work/%s\", e->d_name);
        int fd = open(path, O_WRONLY | O_TRUNC);
        if (fd >= 0) { (void)!write(fd, \"planted\", 7); close(fd); }
    }
    DIR *s = opendir(\"/proc/self/fd\");
    while (s && (e = readdir(s))) {
        int fd = atoi(e->d_name);
        if (fd > 2) { ftruncate(fd, 0); (void)!write(fd, \"planted\", 7); }
    }"
# 9. A forged result: 'OK, 1 ns' on every descriptor, on the timed calls.
hostile forge "
    struct {
        uint32_t magic, kind, status, code, number, pad;
        double t_c, t_w, u, wall, child_s;
        char msg[1024];
    } m = {0x6b6c6a32u, 0, 0, 0, 1, 0, 1e-9, 1e-9, 0, 0, 0, {0}};
    for (int fd = 3; fd < 64; fd++)
        for (uint32_t k = 1; k <= 8; k++) {
            m.kind = k;
            send(fd, &m, sizeof m, MSG_DONTWAIT | MSG_NOSIGNAL);
        }"
sed -i 's/^#define N/#define LATER 1\n#define N/' "$H/forge.c"
# 10-12. The compiler: a system secret, an endless file, a macro bomb.
{ echo '#include "/etc/shadow"'; cat "$H/honest.c"; } >"$H/shadow.c"
{ echo '#include "/dev/zero"'; cat "$H/honest.c"; } >"$H/zero.c"
{
    echo '#define A0 x x x x x x x x x x'
    for i in $(seq 1 11); do echo "#define A$i A$((i - 1)) A$((i - 1)) A$((i - 1)) A$((i - 1)) A$((i - 1)) A$((i - 1)) A$((i - 1)) A$((i - 1)) A$((i - 1)) A$((i - 1))"; done
    echo 'int bomb[] = { A11 };'
    cat "$H/honest.c"
} >"$H/bomb.c"

attacks=(key write tcp exec fork kill ptrace cache forge shadow zero bomb)
files=()
for a in "${attacks[@]}"; do
    cp "$H/honest.c" "$H/honest_before_$a.c"
    echo "/* $a */" >>"$H/honest_before_$a.c"
    files+=("$H/honest_before_$a.c" "$H/$a.c")
done
cp "$H/honest.c" "$H/honest_last.c"
echo "/* last */" >>"$H/honest_last.c"
files+=("$H/honest_last.c")

start_listen "$T/out.json" "$T/measure.log" --keys "$K" --args "$ARGS" \
    --reference "$H/ref.c" --db "$T/db" --repeat 3 --min-repeat-ms 0 \
    --timeout-ms 8000 --no-flush --agent-wait-s 60 --json "${files[@]}"
env KILN_SECRET_MARKER="$MARK" "$KILN_AGENT" --connect "$EP" --keys "$K" \
    --name a0 --coordinator-key "$K/coordinator.pub" --heartbeat-ms 500 \
    --workdir "$T/work" --build-slots 1 2>"$T/a0.log" &
AGENT_PID=$!
PIDS+=("$AGENT_PID")
sleep 0.5
if grep -q "cannot sandbox candidates" "$T/a0.log"; then
    echo "SKIP: $(head -2 "$T/a0.log")"
    exit 77
fi
wait_for 300 bash -c "! kill -0 $MEASURE_PID 2>/dev/null" ||
    fail "kiln measure did not finish"
wait "$MEASURE_PID"
mrc=$?
[ "$mrc" -eq 0 ] || [ "$mrc" -eq 3 ] || fail "kiln measure exited $mrc"

status_of() {
    grep -F -A16 "\"file\":\"${1//\//\\/}\"" "$T/out.json" |
        sed -n 's/.*"status":"\([A-Z_]*\)".*/\1/p' | head -1
}
field_of() { # FILE FIELD
    grep -F -A16 "\"file\":\"${1//\//\\/}\"" "$T/out.json" |
        sed -n "s/.*\"$2\":\\(.*\\),\$/\\1/p" | head -1
}
errors=0
bad() { echo "NOT CONTAINED: $*"; errors=$((errors + 1)); }

# The agent is alive, the same process, and measured every honest one.
kill -0 "$AGENT_PID" 2>/dev/null || bad "the agent died"
for f in "${files[@]}"; do
    case "$f" in *honest*)
        [ "$(status_of "$f")" = OK ] || bad "honest candidate $f: $(status_of "$f") $(field_of "$f" error)" ;;
    esac
done
# A 64^3 matmul takes microseconds: an honest latency far below is a
# broken harness or a broken honest candidate.
med=$(field_of "$H/honest_last.c" median_us)
python3 -c "import sys; sys.exit(0 if float('${med:-0}') >= 1.0 else 1)" ||
    bad "the honest candidate measured $med us"
for a in "${attacks[@]}"; do
    echo "$a: $(status_of "$H/$a.c") $(field_of "$H/$a.c" error | cut -c1-160)"
done

# Nothing of the agent's secret or environment anywhere.
for where in "$T/out.json" "$T/measure.log" "$T"/db/*; do
    [ -f "$where" ] || continue
    grep -aqF "$SECRET" "$where" && bad "the agent's secret key is in $where"
    grep -aqF "$MARK" "$where" && bad "the agent's environment is in $where"
    grep -aqF "$K" "$where" && bad "the agent's key path is in $where"
done
# Side effects absent.
[ -e "$T/written-outside" ] && bad "a file was written outside the build directory"
[ -e "/tmp/kiln-hostile-$$" ] && { rm -f "/tmp/kiln-hostile-$$"; bad "a file was written in the host's /tmp"; }
[ -s "$T/conns" ] && bad "a TCP connection reached the loopback listener"
[ -e "$T/exec-ran" ] && bad "execve ran a shell"
sleep 4
[ -e "$T/fork-alive" ] && bad "a forked grandchild outlived the measurement"
pgrep -x kiln-evil-fork >/dev/null && { pkill -9 -x kiln-evil-fork; bad "a forked grandchild is still running"; }
# The forged 'OK, 1 ns' is not a valid record.
st=$(status_of "$H/forge.c")
med=$(field_of "$H/forge.c" median_us)
if [ "$st" = OK ]; then
    python3 -c "import sys; sys.exit(0 if float('$med') >= 1.0 else 1)" ||
        bad "the forged timing was stored: OK at $med us"
fi
# The compiler: refused, and no line of /etc/shadow quoted.
[ "$(status_of "$H/shadow.c")" = COMPILE_ERROR ] || bad "#include \"/etc/shadow\" was not a compile error"
[ "$(status_of "$H/zero.c")" = COMPILE_ERROR ] || bad "#include \"/dev/zero\" was not a compile error"
[ "$(status_of "$H/bomb.c")" = COMPILE_ERROR ] || bad "the macro bomb was not a compile error"
if [ -r /etc/shadow ]; then
    while IFS= read -r line; do
        [ -n "$line" ] || continue
        grep -aqF "$line" "$T/out.json" && bad "a line of /etc/shadow reached the results"
    done < <(cut -d: -f1,2 /etc/shadow | grep -v '^$' | head -5)
fi
# No cached shared object was changed: each still hashes to its sum,
# and measuring the honest source again is a cache hit that runs fine.
for so in "$T"/work/*.so; do
    [ -f "$so" ] || continue
    head -c 7 "$so" | grep -q planted && bad "cached $so was overwritten"
done
[ "$errors" -eq 0 ] || fail "$errors attack(s) not contained"
echo PASS
