# Shared by the integration scripts: a temp dir, processes stopped and the
# dir removed on exit, waiting helpers, and the 256x256 matmul candidates.
# Needs KILN, KILN_AGENT and ITEST_TOOL in the environment (meson sets them).
set -u
T=$(mktemp -d "${TMPDIR:-/tmp}/kiln-itest-XXXXXX")
PIDS=()
ARGS="A:f32[256,256] B:f32[256,256] C:f32[256,256]:out"
# Small evaluator so 40 candidates fit in seconds; TIMEOUT after 3 s.
EVAL=(--repeat 3 --min-repeat-ms 0 --timeout-ms 3000 --no-flush)

cleanup() {
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do
        for _ in $(seq 40); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
        kill -KILL "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() { echo "FAIL: $*"; for f in "$T"/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done; exit 1; }

# wait_for SECONDS COMMAND...: polls until COMMAND succeeds.
wait_for() {
    local n=$(( $1 * 10 )); shift
    for _ in $(seq "$n"); do "$@" && return 0; sleep 0.1; done
    return 1
}

# The endpoint a `kiln measure --listen` printed to its log.
endpoint_of() { sed -n 's/^kiln measure: listening on \(tcp:[^ ]*\).*/\1/p' "$1" | head -1; }

# make_candidates DIR: the reference and 40 candidates of C = A x B
# (256x256), and DIR/expect (FILE=STATUS per line).
make_candidates() {
    local d=$1 i=0 n
    mkdir -p "$d"
    cat >"$d/ref.c" <<'C'
void kernel(void *const *args)
{
    const float *A = args[0], *B = args[1];
    float *C = args[2];
    for (int i = 0; i < 256; i++)
        for (int j = 0; j < 256; j++) {
            float s = 0;
            for (int k = 0; k < 256; k++)
                s += A[i * 256 + k] * B[k * 256 + j];
            C[i * 256 + j] = s;
        }
}
C
    : >"$d/expect"
    # 20 correct ones: six loop orders, each in a few variants.
    local orders=(ijk ikj jik jki kij kji)
    for n in $(seq 0 19); do
        local o=${orders[$((n % 6))]}
        local a=${o:0:1} b=${o:1:1} c=${o:2:1}
        local f="$d/ok_${o}_$n.c"
        cat >"$f" <<C
/* loop order $o, variant $n */
void kernel(void *const *args)
{
    const float *A = args[0], *B = args[1];
    float *C = args[2];
    for (int x = 0; x < 256 * 256; x++)
        C[x] = 0.0f;
    for (int $a = 0; $a < 256; $a++)
        for (int $b = 0; $b < 256; $b++)
            for (int $c = 0; $c < 256; $c++)
                C[i * 256 + j] += A[i * 256 + k] * B[k * 256 + j];
}
C
        echo "$f=OK" >>"$d/expect"
    done
    for n in $(seq 0 4); do
        echo "void kernel(void *const *args) { int x = $n  return; }" >"$d/cerr_$n.c"
        echo "$d/cerr_$n.c=COMPILE_ERROR" >>"$d/expect"
    done
    for n in $(seq 0 4); do
        cat >"$d/segv_$n.c" <<C
void kernel(void *const *args)
{
    float *C = args[2];
    C[(long)1 << (40 + $n)] = 1.0f; /* far outside anything mapped */
}
C
        echo "$d/segv_$n.c=RUNTIME_ERROR" >>"$d/expect"
    done
    for n in $(seq 0 2); do
        cat >"$d/loop_$n.c" <<C
void kernel(void *const *args)
{
    volatile float *C = args[2];
    for (;;)
        C[$n] += 1.0f;
}
C
        echo "$d/loop_$n.c=TIMEOUT" >>"$d/expect"
    done
    # 7 wrong ones: scaled, a row missed, nothing written, B transposed,
    # an offset, k stopping early, zeros.
    local bodies=(
        "C[i * 256 + j] = 1.01f * s;"
        "if (i != 255) C[i * 256 + j] = s;"
        "(void)s;"
        "C[i * 256 + j] = s + 0.0f * B[0]; if (i == j) C[i * 256 + j] += 0.5f;"
        "C[i * 256 + j] = s + 0.01f;"
        "C[i * 256 + j] = s - A[i * 256 + 255] * B[255 * 256 + j];"
        "C[i * 256 + j] = 0.0f * s;"
    )
    for n in $(seq 0 6); do
        cat >"$d/wrong_$n.c" <<C
void kernel(void *const *args)
{
    const float *A = args[0], *B = args[1];
    float *C = args[2];
    for (int i = 0; i < 256; i++)
        for (int j = 0; j < 256; j++) {
            float s = 0;
            for (int k = 0; k < 256; k++)
                s += A[i * 256 + k] * B[k * 256 + j];
            ${bodies[$n]}
        }
}
C
        echo "$d/wrong_$n.c=WRONG_RESULT" >>"$d/expect"
    done
}

# The candidate files of DIR/expect, and the FILE=STATUS list.
cand_files() { cut -d= -f1 "$1/expect"; }
expectations() { cat "$1/expect"; }

# keys NAME...: a coordinator keypair in $T/keys and one keypair per agent
# NAME in $T/NAME; the NAMEs given are allow-listed in $T/keys/agents.
keys() {
    "$KILN" keygen "$T/keys" coordinator >/dev/null || fail "keygen"
    mkdir -p "$T/keys/agents"
    for a in "$@"; do
        "$KILN" keygen "$T/$a" "$a" >/dev/null || fail "keygen $a"
        cp "$T/$a/$a.pub" "$T/keys/agents/"
    done
}

# start_listen OUT LOG ARGS...: kiln measure --listen in the background on
# an ephemeral loopback port; sets MEASURE_PID and EP.
start_listen() {
    local out=$1 log=$2; shift 2
    "$KILN" measure --listen 'tcp://127.0.0.1:*' "$@" >"$out" 2>"$log" &
    MEASURE_PID=$!
    PIDS+=("$MEASURE_PID")
    wait_for 10 grep -q "listening on" "$log" || fail "kiln measure did not bind"
    EP=$(endpoint_of "$log")
}

# start_agent NAME [KEYNAME]: kiln-agent NAME with the keys of KEYNAME
# (default NAME), CURVE, pinned to the coordinator key; sets AGENT_PID.
start_agent() {
    local name=$1 key=${2:-$1}
    "$KILN_AGENT" --connect "$EP" --keys "$T/$key" --name "$key" \
        --coordinator-key "$T/keys/coordinator.pub" --heartbeat-ms 500 \
        2>"$T/$name.log" &
    AGENT_PID=$!
    PIDS+=("$AGENT_PID")
}
