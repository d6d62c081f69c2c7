#!/usr/bin/env bash
# kiln export and kiln run on a small graph tuned here on a local fleet (one
# real kiln-agent, real compiles and timings): the sources build into
# libkiln_model.so, which runs and matches the naive build; a faster record
# committed under another target string is never used; a task without a
# record exits 3 and is named; --fallback naive warns once per such task;
# a record under an AMX target makes a library that asks for the tile
# state and, where it is refused, says so.
. "$(dirname "$0")/lib.sh"
TEVAL=(--repeat 3 --min-repeat-ms 0 --timeout-ms 5000 --no-flush)

# This machine's exact CPU target, as kiln-agent reports it.
flags=$(grep -m1 '^flags' /proc/cpuinfo)
if [[ " $flags " == *" avx512f "* ]]; then
    TGT=cpu/x86_64-avx512 OTHER=cpu/x86_64-avx2
elif [[ " $flags " == *" avx2 "* && " $flags " == *" fma "* ]]; then
    TGT=cpu/x86_64-avx2 OTHER=cpu/x86_64-avx512
else
    echo "SKIP: no design space for this CPU's target"; exit 77
fi
command -v "${CC:-cc}" >/dev/null || { echo "SKIP: no C compiler"; exit 77; }

cat >"$T/tiny.graph" <<'G'
model tiny
input x 1x8x16x16
c = conv2d x K=8 R=3 pad=1 bias=1
r = relu c
p = max_pool2d r R=2
c2 = conv2d p K=8 R=3 pad=1 bias=1
s = add c2 p
f = flatten s
d = dense f O=32
sm = softmax d
output sm
G
"$KILN" tune --model "$T/tiny.graph" --target "$TGT" --max-trials-per-task 3 \
    --trials-per-iter 3 --db "$T/db" --strategy replay --quiet "${TEVAL[@]}" \
    >"$T/tune.out" 2>"$T/tune.log" || fail "kiln tune --model exited $?"

# A faster record of the dense task under another target string: a copy of
# one of its real records with another target, a tiny median and seq 0.
dkey=$("$KILN" db export --db "$T/db" |
    sed -n 's/.*"type":"workload","key":"\([0-9a-f]*\)".*"name":"dense_1_512_32_bias".*/\1/p')
[ -n "$dkey" ] || fail "no dense workload in the store"
"$KILN" db export --db "$T/db" | grep "\"type\":\"record\",\"workload_key\":\"$dkey\"" |
    head -1 | sed -e "s#\"target\":\"$TGT\"#\"target\":\"$OTHER\"#" \
        -e 's/"median_s":[^,]*/"median_s":1e-09/' -e 's/"seq":[0-9]*/"seq":0/' \
        >"$T/other.jsonl"
grep -q "\"target\":\"$OTHER\"" "$T/other.jsonl" || fail "could not make the other record"
"$KILN" db import --db "$T/db" "$T/other.jsonl" >"$T/import.log" 2>&1 ||
    fail "import of the other-target record exited $?"
"$KILN" db ls --db "$T/db" | grep -q "$OTHER" || fail "the other target is not in the store"

# A record of the dense task whose trace packs its constant weight W before
# the parallel loop, so that its kernel has a prepare step (kl_abi.h): a
# copy of one of its real records with that trace (kiln.Trace encoded
# here), a distinct trace hash and a median that makes it the best.
line=$("$KILN" db export --db "$T/db" | grep "\"type\":\"record\",\"workload_key\":\"$dkey\"" |
    grep "\"target\":\"$TGT\"" | head -1)
[ -n "$line" ] || fail "no record of the dense task on $TGT"
python3 - "$TGT" "$line" >"$T/packed.jsonl" <<'P' || fail "could not make the packed record"
import json, re, sys
def varint(n):
    n &= (1 << 64) - 1
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out
def ld(field, data):
    return varint(field << 3 | 2) + varint(len(data)) + data
def inst(op, inputs=(), strs=(), outputs=()):
    b = ld(1, op.encode())
    if inputs:
        b += ld(2, b"".join(varint(x) for x in inputs))
    for s in strs:
        b += ld(4, s.encode())
    if outputs:
        b += ld(5, b"".join(varint(x) for x in outputs))
    return b
# l0, l1, l2 = get_loops(); l3, l4 = split(l1, 2, ?); reorder(l3, l0)
# parallel(l3); b5 = cache_read(tensor="W", scope="packed")  (at the root)
insts = [inst("get_loops", outputs=(0, 1, 2)),
         inst("split", inputs=(1, -2, -(1 << 63)), outputs=(3, 4)),
         inst("reorder", inputs=(3, 0)), inst("parallel", inputs=(3,)),
         inst("cache_read", strs=("W", "packed"), outputs=(5,))]
trace = b"".join(ld(1, i) for i in insts) + ld(2, sys.argv[1].encode())
line = re.sub(r'"trace":"[0-9a-f]*"', '"trace":"%s"' % trace.hex(), sys.argv[2])
line = re.sub(r'"trace_hash":"[0-9a-f]*"', '"trace_hash":"%s"' % ("5a" * 16), line)
line = re.sub(r'"median_s":[^,]*', '"median_s":2e-09', line)
print(re.sub(r'"seq":[0-9]*', '"seq":0', line))
P
"$KILN" db import --db "$T/db" "$T/packed.jsonl" >"$T/import2.log" 2>&1 ||
    fail "import of the packed record exited $?"

# The export: "cpu" means this machine's exact target.
"$KILN" export --db "$T/db" --model "$T/tiny.graph" --target cpu --out "$T/out" \
    >"$T/export.out" 2>"$T/export.log" || fail "kiln export exited $?"
for f in manifest.json kiln_model.c kiln_model.h libkiln_model.so task_00.c task_03.c; do
    [ -s "$T/out/$f" ] || fail "export did not write $f"
done
[ "$(grep -c '"source":"tuned"' "$T/out/manifest.json")" -eq 4 ] ||
    fail "manifest: not 4 tuned tasks"
grep -q "\"target\":\"$TGT\"" "$T/out/manifest.json" || fail "manifest: not on $TGT"
grep -q "\"target\":\"$OTHER\"" "$T/out/manifest.json" &&
    fail "a record of $OTHER was used"
grep -q '"latency_s":1e-09' "$T/out/manifest.json" && fail "the faster other-target record was used"
# Every task says whether its kernel has a prepare step (kl_abi.h); each
# that has one is declared in kiln_model.c, and kiln run prepares the
# layers of those tasks (their weights) once, before its timed runs.
[ "$(grep -c '"prepare":\(true\|false\)' "$T/out/manifest.json")" -eq 4 ] ||
    fail "manifest: not one prepare flag per task"
nprep=$(python3 - "$T/out" <<'P'
import json, sys
d = sys.argv[1]
m = json.load(open(d + "/manifest.json"))
src = open(d + "/kiln_model.c").read()
n = 0
for t in m["tasks"]:
    decl = "void *kiln_task_%02d_prepare(void *const *args);" % t["id"]
    task = open(d + "/" + t["file"]).read()
    if t["prepare"] != (decl in src) or t["prepare"] != ("kiln_task_%02d_prepare(" % t["id"] in task):
        sys.exit("task %d: prepare %s disagrees with the sources" % (t["id"], t["prepare"]))
    n += t["weight"] if t["prepare"] else 0
print(n)
P
) || fail "prepare flags: $nprep"
echo "layers whose kernel has a prepare step: $nprep"
python3 - "$T/out/manifest.json" <<'P' || fail "the dense task's packed record was not exported with a prepare step"
import json, sys
t = [t for t in json.load(open(sys.argv[1]))["tasks"] if t["name"] == "dense_1_512_32_bias"]
sys.exit(not (len(t) == 1 and t[0]["prepare"] and t[0]["latency_s"] < 3e-9))
P
"$KILN" run --lib "$T/out/libkiln_model.so" --model "$T/tiny.graph" --repeat 5 \
    >"$T/run.out" 2>"$T/run.log" || fail "kiln run exited $?"
grep -q "^prepared the constant inputs of $nprep layer(s) with kiln_model_prepare in [0-9.]* ms (outside the timed runs)" \
    "$T/run.out" || fail "kiln run: no prepare line for $nprep layers: $(cat "$T/run.out")"
# The latency line names the threads' settings, pinned or not.
env -u OMP_PROC_BIND "$KILN" run --lib "$T/out/libkiln_model.so" --model "$T/tiny.graph" \
    --repeat 1 --no-dnnl >"$T/run_free.out" 2>"$T/run_free.log" || fail "kiln run (not pinned) exited $?"
grep -q "^end-to-end latency, median of 1 runs (min .. max), OMP_NUM_THREADS=.*, OMP_PROC_BIND=(unset: threads not pinned):$" \
    "$T/run_free.out" || fail "kiln run: the latency line does not say the threads are not pinned"
OMP_PROC_BIND=close "$KILN" run --lib "$T/out/libkiln_model.so" --model "$T/tiny.graph" \
    --repeat 1 --no-dnnl >"$T/run_bind.out" 2>"$T/run_bind.log" || fail "kiln run (pinned) exited $?"
grep -q "OMP_PROC_BIND=close:$" "$T/run_bind.out" ||
    fail "kiln run: the latency line does not name OMP_PROC_BIND=close"
# oneDNN (when kiln was built with libdnnl): its output checked against
# the naive build's, its median (min .. max) and the ratio to kiln's, one
# line per primitive with its implementation and layouts (the residual of
# c2 is also its source: not summed in place), reorders at the input (when
# c's layout is not plain), the flatten of a blocked tensor, the output.
if [ "${KILN_HAVE_DNNL:-0}" = 1 ]; then
    for re in "^oneDNN's output matches the naive build: largest difference [0-9.e+-]+ of the largest magnitude$" \
        "^oneDNN +[0-9.]+ ms  \([0-9.]+ \.\. [0-9.]+\)  oneDNN / kiln = [0-9.]+$" \
        "^oneDNN layer c: convolution [^ ]+ \(src [a-zA-Z0-9]+, dst [a-zA-Z0-9]+\)$" \
        "^oneDNN layer p: pooling [^ ]+ \(src [a-zA-Z0-9]+, dst [a-zA-Z0-9]+\)$" \
        "^oneDNN layer c2: convolution [^ ]+ \(src [a-zA-Z0-9]+, dst [a-zA-Z0-9]+, residual sum (copied|reordered)\)$" \
        "^oneDNN layer d: inner_product [^ ]+ \(src ab, dst ab\)$" \
        "^oneDNN layer sm: softmax [^ ]+ " \
        "^oneDNN reorder sm \(output\): [^ ]+ ab -> ab$" \
        "^oneDNN runs [0-9]+ primitives: 5 layers, [0-9]+ reorders \(input [01], between layers [01], output 1, residual 1\); residual sums: 0 in place, [01] copied, [01] reordered per run$"; do
        grep -qE "$re" "$T/run.out" || fail "kiln run: no line /$re/: $(cat "$T/run.out")"
    done
else
    grep -q "^oneDNN +not measured: kiln was built without libdnnl" "$T/run.out" ||
        fail "kiln run: no oneDNN line"
fi
grep -q "^output matches the naive build" "$T/run.out" || fail "kiln run: no match line"
grep -q "^kiln (exported) " "$T/run.out" || fail "kiln run: no latency"
# The library carries its weights (seeded random: a graph file has none),
# and the naive build runs once, for the check, never between timed runs.
grep -q "^weights: kiln export's seeded random ones, embedded in the library" \
    "$T/run.out" || fail "kiln run: no weights line: $(cat "$T/run.out")"
grep -q "^naive build: one run for the check" "$T/run.out" ||
    fail "kiln run: the naive build is not run once"
grep -qE "^naive +[0-9.]+ ms" "$T/run.out" && fail "kiln run still times the naive build"
[ -s "$T/out/kiln_model.weights" ] && [ -s "$T/out/kiln_weights.S" ] ||
    fail "export wrote no kiln_model.weights / kiln_weights.S"
grep -q "^weights: seeded random, uniform in \[-0.1, 0.1), seed 1" "$T/export.out" ||
    fail "kiln export does not say where the weights come from: $(cat "$T/export.out")"
# The library does not read the weights file at run time.
mv "$T/out/kiln_model.weights" "$T/weights.moved"

# Input and output as .npy files (written and read here with struct, no
# numpy): the output is softmax's, (1, 32), summing to 1; --expect of a
# copy passes, of a copy with one element moved fails naming it.
NPY="python3 $(dirname "$0")/npy_tool.py"
$NPY write "$T/x.npy" '<f4' 1x8x16x16 || fail "cannot write x.npy"
"$KILN" run --lib "$T/out/libkiln_model.so" --model "$T/tiny.graph" --repeat 3 \
    --no-dnnl --input "$T/x.npy" --output "$T/y.npy" --profile \
    >"$T/npy.out" 2>"$T/npy.log" || fail "kiln run --input --output exited $?: $(cat "$T/npy.log")"
grep -q "^input x: $T/x.npy" "$T/npy.out" || fail "kiln run: --input not used"
sums=$($NPY check "$T/y.npy" 1x32) || fail "the output file: $sums"
awk -v s="$(echo "$sums" | cut -d' ' -f2)" -v lo="$(echo "$sums" | cut -d' ' -f4)" \
    'BEGIN { exit !(s > 0.9999 && s < 1.0001 && lo > 0) }' ||
    fail "the output is not a softmax: $sums"
cp "$T/y.npy" "$T/ref.npy"
"$KILN" run --lib "$T/out/libkiln_model.so" --model "$T/tiny.graph" --repeat 1 \
    --no-dnnl --input "$T/x.npy" --expect "$T/ref.npy" >"$T/exp.out" 2>"$T/exp.log" ||
    fail "kiln run --expect of its own output exited $?: $(cat "$T/exp.log")"
grep -q "^output matches $T/ref.npy: 32 elements, .*rtol 0.0001)" "$T/exp.out" ||
    fail "kiln run --expect: no match line: $(cat "$T/exp.out")"
$NPY perturb "$T/ref.npy" "$T/off.npy" 7 1e-3 || fail "cannot write off.npy"
"$KILN" run --lib "$T/out/libkiln_model.so" --model "$T/tiny.graph" --repeat 1 \
    --no-dnnl --input "$T/x.npy" --expect "$T/off.npy" >/dev/null 2>"$T/off.log"
[ $? -eq 1 ] || fail "an output off by 1e-3 of the largest passes --expect"
grep -q "output differs from $T/off.npy: element 7 (0, 7) is .*, expected .*rtol 0.0001 x largest |expected|" \
    "$T/off.log" || fail "the --expect failure does not name the element: $(cat "$T/off.log")"
"$KILN" run --lib "$T/out/libkiln_model.so" --model "$T/tiny.graph" --repeat 1 \
    --no-dnnl --input "$T/x.npy" --expect "$T/off.npy" --rtol 1e-2 >/dev/null 2>&1 ||
    fail "--rtol 1e-2 does not accept a difference of 1e-3"

# --profile: every layer (conv c with its relu, the pool, conv c2 with the
# residual add, the dense layer, softmax) with its time and its task's
# tuned latency, and the three totals.
for l in c p c2 d; do
    grep -qE "^  $l +[0-9]+  [a-z0-9_]+ +[0-9.]+ +[0-9.]+$" "$T/npy.out" ||
        fail "--profile: no line for layer $l with a tuned latency: $(cat "$T/npy.out")"
done
grep -qE "^  sm +- +\(no task\) +[0-9.]+ +-$" "$T/npy.out" ||
    fail "--profile: no line for the softmax layer"
[ "$(grep -cE '^  [a-z0-9_]+ +([0-9]+|-) ' "$T/npy.out")" -eq 5 ] ||
    fail "--profile: not 5 layers"
for t in "sum of layer medians" "end-to-end median" "sum of weighted tuned latencies"; do
    grep -qE "^total: $t +[0-9.]+ ms" "$T/npy.out" || fail "--profile: no total '$t'"
done
python3 - "$T/out/manifest.json" "$T/npy.out" <<'P' || fail "--profile: the weighted sum is not the manifest's"
import json, re, sys
m = json.load(open(sys.argv[1]))
want = sum(t["weight"] * t["latency_s"] for t in m["tasks"]) * 1e3
got = float(re.search(r"^total: sum of weighted tuned latencies +([0-9.]+) ms",
                      open(sys.argv[2]).read(), re.M).group(1))
sys.exit(abs(got - want) > 1e-4 + 1e-3 * want)
P

# Bad inputs: the wrong shape and float64 are named, exit 1.
$NPY write "$T/wrong.npy" '<f4' 1x8x16x8 && $NPY write "$T/f64.npy" '<f8' 1x8x16x16 ||
    fail "cannot write the bad inputs"
"$KILN" run --lib "$T/out/libkiln_model.so" --model "$T/tiny.graph" \
    --input "$T/wrong.npy" >/dev/null 2>"$T/wrong.log"
[ $? -eq 1 ] && grep -q "$T/wrong.npy: shape (1, 8, 16, 8) (1024 elements) does not match the expected (1, 8, 16, 16) (2048 elements)" \
    "$T/wrong.log" || fail "a wrong-shape input: $(cat "$T/wrong.log")"
"$KILN" run --lib "$T/out/libkiln_model.so" --model "$T/tiny.graph" \
    --input "$T/f64.npy" >/dev/null 2>"$T/f64.log"
[ $? -eq 1 ] && grep -q "$T/f64.npy: dtype '<f8', .*astype(np.float32)" "$T/f64.log" ||
    fail "a float64 input: $(cat "$T/f64.log")"
"$KILN" run --lib "$T/out/libkiln_model.so" --model "$T/tiny.graph" \
    --expect "$T/x.npy" >/dev/null 2>"$T/expshape.log"
[ $? -eq 1 ] && grep -q "^kiln run: --expect: $T/x.npy: shape (1, 8, 16, 16) (2048 elements) does not match the expected (1, 32) (32 elements)" \
    "$T/expshape.log" || fail "an --expect of another shape: $(cat "$T/expshape.log")"
"$KILN" run --lib "$T/out/libkiln_model.so" --model "$T/tiny.graph" \
    --input "$T/x.npy" --input "$T/x.npy" >/dev/null 2>"$T/two.log"
[ $? -eq 1 ] && grep -q "the model has 1 input, 2 --input given" "$T/two.log" ||
    fail "two --input for one input: $(cat "$T/two.log")"

# A library exported before weights were embedded (no
# kiln_model_param_data) runs on random weights and says so.
mv "$T/weights.moved" "$T/out/kiln_model.weights"
mkdir -p "$T/old"
"${CC:-cc}" -O1 -fopenmp -shared -fPIC -Dkiln_model_param_data=kiln_old_param_data \
    -o "$T/old/libkiln_model.so" "$T"/out/task_*.c "$T/out/kiln_model.c" \
    "$T/out/kiln_weights.S" -lm 2>"$T/old.log" || fail "cannot build the old library: $(cat "$T/old.log")"
"$KILN" run --lib "$T/old/libkiln_model.so" --model "$T/tiny.graph" --repeat 1 \
    --no-dnnl >"$T/old.out" 2>>"$T/old.log" || fail "kiln run of an old library exited $?"
grep -q "^no kiln_model_param_data in the library (exported before weights were embedded): random weights (seed 1)" \
    "$T/old.out" && grep -q "^output matches the naive build" "$T/old.out" ||
    fail "kiln run of an old library: $(cat "$T/old.out")"

# On the other target only the dense task has a record: exit 3, naming the
# three others.
"$KILN" export --db "$T/db" --model "$T/tiny.graph" --target "$OTHER" \
    --out "$T/other" >/dev/null 2>"$T/other.log"
[ $? -eq 3 ] || fail "export on $OTHER does not exit 3"
for n in conv2d_1_8_16_16_8_3_3_s1_p1_bias_relu max_pool2d_1_8_16_16_2_2_s2_p0 \
    conv2d_1_8_8_8_8_3_3_s1_p1_bias_res; do
    grep -q "$n" "$T/other.log" || fail "the missing task $n is not named"
done
[ -e "$T/other/manifest.json" ] && fail "a failed export wrote a manifest"

# A graph with one task never tuned: exit 3 naming it; with the fallback,
# one warning and a library that still matches the naive build.
sed 's/^sm = softmax d$/e = dense d O=16\nsm = softmax e/' "$T/tiny.graph" >"$T/more.graph"
"$KILN" export --db "$T/db" --model "$T/more.graph" --out "$T/more" \
    >/dev/null 2>"$T/more.log"
[ $? -eq 3 ] || fail "a missing task does not exit 3"
grep -q "dense_1_32_16_bias" "$T/more.log" || fail "the missing task is not named"
"$KILN" export --db "$T/db" --model "$T/more.graph" --out "$T/more" \
    --fallback naive >/dev/null 2>"$T/fb.log" || fail "fallback export exited $?"
[ "$(grep -c 'warning: naive kernel for' "$T/fb.log")" -eq 1 ] ||
    fail "not exactly one warning with --fallback naive"
grep -q "warning: naive kernel for task 4 dense_1_32_16_bias" "$T/fb.log" ||
    fail "the warning does not name the task"
"$KILN" run --lib "$T/more/libkiln_model.so" --model "$T/more.graph" --repeat 3 \
    --no-dnnl >"$T/run2.out" 2>"$T/run2.log" || fail "kiln run (fallback) exited $?"
"$KILN" run --lib "$T/more/libkiln_model.so" --model "$T/tiny.graph" \
    --no-dnnl >/dev/null 2>"$T/wrong.log"
[ $? -eq 1 ] && grep -q "was not exported from model" "$T/wrong.log" ||
    fail "a library of another model is not refused"

# Transposes (copies in the library, reorders in oneDNN) and matmuls, all
# naive: oneDNN's output, an independent build of the graph, must agree.
cat >"$T/tr.graph" <<'G'
model tr
input x 4x16x64
t = transpose x perm=1,2,0
r = reshape t shape=16x256
d = dense r O=64
t2 = transpose d perm=1,0
m = matmul t2 N=32
G
"$KILN" export --db "$T/db" --model "$T/tr.graph" --out "$T/tr" --fallback naive \
    >/dev/null 2>"$T/tr.log" || fail "export of the transpose graph exited $?"
"$KILN" run --lib "$T/tr/libkiln_model.so" --model "$T/tr.graph" --repeat 3 \
    >"$T/tr.out" 2>>"$T/tr.log" || fail "kiln run (transpose) exited $?"
if [ "${KILN_HAVE_DNNL:-0}" = 1 ]; then
    rel=$(sed -n "s/^oneDNN's output matches the naive build: largest difference \([^ ]*\) of the largest magnitude$/\1/p" "$T/tr.out")
    [ -n "$rel" ] || fail "no oneDNN figure for the transpose graph: $(cat "$T/tr.out")"
    awk -v r="$rel" 'BEGIN { exit !(r < 1e-4) }' || fail "oneDNN disagrees: $rel"
fi

# One operator.
"$KILN" export --db "$T/db" --op "max_pool2d N=1 C=8 H=16 W=16 R=2 S=2" \
    --out "$T/op" >"$T/op.out" 2>"$T/op.log" || fail "export --op exited $?"
[ -s "$T/op/max_pool2d_1_8_16_16_2_2_s2_p0.c" ] || fail "export --op wrote no source"
"$KILN" export --db "$T/db" --op "dense N=1 I=512 O=32 bias=1" --out "$T/op" \
    >"$T/op3.out" 2>"$T/op3.log" || fail "export --op of the dense task exited $?"
grep -q "defines kl_main_prepare" "$T/op3.out" &&
    grep -q "void \*kl_main_prepare(" "$T/op/dense_1_512_32_bias.c" ||
    fail "export --op of a kernel with a prepare step does not say so"
"$KILN" export --db "$T/db" --op "relu shape=4x4" --out "$T/op" \
    >/dev/null 2>"$T/op2.log"
[ $? -eq 3 ] && grep -q "no valid record of relu_4x4 .* on target $TGT" "$T/op2.log" ||
    fail "export --op of an untuned operator: not exit 3 naming it"
"$KILN" export --db "$T/db" --out "$T/x" >/dev/null 2>&1
[ $? -eq 2 ] || fail "no --model nor --op does not exit 2"

# A record of the dense task under an AMX target (a copy of a real one):
# the library asks Linux for the tile state before its first prepare
# step; where it is not granted (a CPU without AMX) kiln run says why
# instead of dying of SIGILL. A library without an AMX kernel never asks.
if [ "$TGT" = cpu/x86_64-avx512 ]; then
    AMX=$TGT+bf16+amx
    "$KILN" db export --db "$T/db" | grep "\"type\":\"record\",\"workload_key\":\"$dkey\"" |
        grep "\"target\":\"$TGT\"" | head -1 |
        sed -e "s#\"target\":\"$TGT\"#\"target\":\"$AMX\"#" -e 's/"seq":[0-9]*/"seq":0/' \
        >"$T/amx.jsonl"
    grep -q "\"target\":\"$AMX\"" "$T/amx.jsonl" || fail "could not make the AMX record"
    "$KILN" db import --db "$T/db" "$T/amx.jsonl" >"$T/import3.log" 2>&1 ||
        fail "import of the AMX record exited $?"
    "$KILN" export --db "$T/db" --model "$T/tiny.graph" --target "$AMX" \
        --fallback naive --out "$T/amx" >/dev/null 2>"$T/amx.log" ||
        fail "export on $AMX exited $?: $(cat "$T/amx.log")"
    grep -q "ARCH_REQ_XCOMP_PERM" "$T/amx/kiln_model.c" ||
        fail "the AMX library does not ask for the tile state"
    grep -q "kiln_model_amx_error" "$T/amx/kiln_model.h" ||
        fail "the AMX library's header has no kiln_model_amx_error"
    grep -q "s_amx\|XCOMP\|amx_error" "$T/out/kiln_model.c" "$T/out/kiln_model.h" &&
        fail "a library without an AMX kernel asks for the tile state"
    "$KILN" run --lib "$T/amx/libkiln_model.so" --model "$T/tiny.graph" \
        --repeat 3 --no-dnnl >"$T/amx.out" 2>"$T/amxrun.log"
    rc=$?
    if grep -q '^flags.* amx_tile' /proc/cpuinfo; then
        [ $rc -eq 0 ] || fail "kiln run of the AMX library exited $rc: $(cat "$T/amxrun.log")"
    else
        [ $rc -eq 1 ] &&
            grep -q "kernels use AMX tiles and this CPU has no AMX" "$T/amxrun.log" ||
            fail "kiln run of the AMX library here (no AMX): exit $rc, $(cat "$T/amxrun.log")"
        echo "kiln run of the AMX library here: $(tail -1 "$T/amxrun.log")"
    fi
fi
echo PASS
