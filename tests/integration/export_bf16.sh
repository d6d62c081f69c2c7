#!/usr/bin/env bash
# kiln extract / tune / export --precision bf16 on a small graph tuned here
# on a local fleet (one real kiln-agent): its conv2d and dense tasks are
# their in=bf16 forms (the pool and the add stay f32), tuned and verified;
# the export of an f32-only store in bf16 exits 3 naming the bf16 tasks;
# the bf16 library (manifest "precision": "bf16") runs on f32 input and
# output and agrees with the f32 naive build within rtol 1.6e-2 of the
# largest output (4 x 2^-8: each bf16 operand is within 2^-9 of its f32
# value, so each product within 2^-8, over the graph's three multiplying
# layers in a row, with a margin), and so does a build whose reads of bf16
# tensors are rounded to bf16 (real bf16 arithmetic, not 0 off); the same
# for ResNet-18 exported with
# --fallback naive (its reference kernels read the f32 values as they
# are). kiln run takes that tolerance from the manifest unless --rtol is
# given. An unknown precision is a usage error naming f32 and bf16.
. "$(dirname "$0")/lib.sh"
TEVAL=(--repeat 3 --min-repeat-ms 0 --timeout-ms 5000 --no-flush)
command -v "${CC:-cc}" >/dev/null || { echo "SKIP: no C compiler"; exit 77; }
BTOL=1.6e-2

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
output d
G
"$KILN" extract --model "$T/tiny.graph" --precision bf16 >"$T/ex.out" 2>&1 ||
    fail "kiln extract --precision bf16 exited $?"
grep -q "^Model tiny, precision bf16:" "$T/ex.out" || fail "extract: no precision line"
[ "$(grep -c '_bf16 .* in=bf16$' "$T/ex.out")" = 3 ] ||
    { cat "$T/ex.out"; fail "extract: not 3 bf16 tasks"; }
grep -q "| max_pool2d_1_8_16_16_2_2_s2_p0 " "$T/ex.out" || fail "extract: the pool is not f32"
"$KILN" extract --model "$T/tiny.graph" --precision f16 >"$T/bad.out" 2>&1
[ $? = 2 ] || fail "an unknown precision is not a usage error"
grep -q "unknown precision 'f16' (expected f32 or bf16)" "$T/bad.out" || fail "the usage error does not name f32 and bf16"

# f32 records only: the bf16 export has none of its multiplying tasks.
"$KILN" tune --model "$T/tiny.graph" --max-trials-per-task 2 --trials-per-iter 2 \
    --db "$T/db" --strategy replay --quiet "${TEVAL[@]}" \
    >"$T/tune32.out" 2>"$T/tune32.log" || fail "kiln tune (f32) exited $?"
"$KILN" export --db "$T/db" --model "$T/tiny.graph" --precision bf16 --out "$T/miss" \
    >"$T/miss.out" 2>"$T/miss.log"
[ $? = 3 ] || { cat "$T/miss.log"; fail "bf16 export without bf16 records did not exit 3"; }
grep -q "3 of 4 tasks have no valid record" "$T/miss.log" || { cat "$T/miss.log"; fail "missing tasks not counted"; }
grep -q "conv2d_1_8_16_16_8_3_3_s1_p1_bias_relu_bf16" "$T/miss.log" || fail "the missing bf16 conv is not named"

# The tolerance against bf16 arithmetic itself: the naive bf16 build with
# every read of a bf16 tensor (X, W of the _bf16 tasks) rounded to bf16
# (nearest even) in its C (all 3 are naive: the store has f32 records
# only yet), rebuilt as kiln export builds it, differs from
# the f32 naive build (not 0) and stays within the manifest's rtol.
"$KILN" export --db "$T/db" --model "$T/tiny.graph" --precision bf16 --fallback naive \
    --out "$T/emu" >"$T/emu.out" 2>"$T/emu.log" || fail "naive bf16 export exited $?"
python3 - "$T/emu" <<'P' || fail "could not round the bf16 reads"
import json, re, sys
d = sys.argv[1]
rnd = ("static inline float kl_bf16r(float v)\n{ uint32_t u; memcpy(&u, &v, 4); "
       "u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u; memcpy(&v, &u, 4); return v; }\n")
n = 0
for i, t in enumerate(json.load(open(d + "/manifest.json"))["tasks"]):
    if not t["name"].endswith("_bf16"):
        continue
    p = "%s/task_%02d.c" % (d, i)
    s = open(p).read()
    k = s.index("void kiln_task_%02d(" % i)
    s = s[:k] + rnd + re.sub(r"(?<![A-Za-z0-9_])([XW])\[([^\]]*)\]", r"kl_bf16r(\1[\2])", s[k:])
    open(p, "w").write(s)
    n += 1
sys.exit(n != 3)
P
(cd "$T/emu" && "${CC:-cc}" -O3 -march=native -fopenmp -shared -fPIC -Wl,-Bsymbolic \
    -Wl,-z,nodelete -o libkiln_model.so task_*.c kiln_model.c kiln_weights.S -lm) \
    >"$T/emucc.log" 2>&1 || fail "the rounded build does not compile: $(tail "$T/emucc.log")"
"$KILN" run --lib "$T/emu/libkiln_model.so" --model "$T/tiny.graph" --repeat 1 \
    --no-dnnl >"$T/emurun.out" 2>"$T/emurun.log" ||
    { cat "$T/emurun.out"; fail "bf16 arithmetic is not within the bf16 tolerance"; }
grep "^output matches the naive build" "$T/emurun.out" || fail "rounded build: no match line"
grep -q "^output matches the naive build: 32 elements, largest difference 0 " "$T/emurun.out" &&
    fail "the rounded build computes f32: the check proves nothing"

"$KILN" tune --model "$T/tiny.graph" --precision bf16 --max-trials-per-task 3 \
    --trials-per-iter 3 --db "$T/db" --strategy replay --quiet "${TEVAL[@]}" \
    >"$T/tune16.out" 2>"$T/tune16.log" || fail "kiln tune --precision bf16 exited $?"
"$KILN" export --db "$T/db" --model "$T/tiny.graph" --precision bf16 --out "$T/out" \
    >"$T/export.out" 2>"$T/export.log" || { cat "$T/export.log"; fail "kiln export --precision bf16 exited $?"; }
grep -q "4 tasks, 4 tuned, 0 naive" "$T/export.out" || { cat "$T/export.out"; fail "not every task tuned"; }
grep -q '"precision":"bf16"' "$T/out/manifest.json" || fail "the manifest does not say bf16"
[ "$(grep -c '"name":"[a-z0-9_]*_bf16"' "$T/out/manifest.json")" = 3 ] || fail "the manifest has not 3 bf16 tasks"
# kiln run takes the bf16 tolerance from the manifest by itself.
"$KILN" run --lib "$T/out/libkiln_model.so" --model "$T/tiny.graph" --repeat 2 \
    --no-dnnl >"$T/run.out" 2>"$T/run.log" ||
    { cat "$T/run.out" "$T/run.log"; fail "kiln run of the bf16 library exited $?"; }
grep -q "^precision bf16 (manifest.json): rtol 0.016" "$T/run.out" ||
    fail "kiln run: no bf16 tolerance from the manifest: $(cat "$T/run.out")"
grep "^output matches the naive build.*rtol 0.016)" "$T/run.out" || fail "kiln run: no match line"

NPY="python3 $(dirname "$0")/npy_tool.py"
$NPY write "$T/x.npy" '<f4' 1x8x16x16 || fail "cannot write x.npy"
"$KILN" run --lib "$T/out/libkiln_model.so" --model "$T/tiny.graph" --repeat 1 \
    --no-dnnl --rtol "$BTOL" --input "$T/x.npy" --output "$T/y.npy" \
    >"$T/npy.out" 2>"$T/npy.log" || fail "kiln run --input --output exited $?: $(cat "$T/npy.log")"
head -c 64 "$T/y.npy" | grep -q "'descr': '<f4'" || fail "the output is not f32"

"$KILN" export --db "$T/db" --model resnet18 --precision bf16 --fallback naive \
    --out "$T/r18" >"$T/r18.out" 2>"$T/r18.log" || { tail "$T/r18.log"; fail "resnet18 bf16 export exited $?"; }
[ "$(grep -c 'warning: naive kernel for task .*_bf16 ' "$T/r18.log")" = 16 ] ||
    fail "not 16 bf16 tasks with a naive kernel"
"$KILN" run --lib "$T/r18/libkiln_model.so" --model resnet18 --repeat 1 \
    --no-dnnl --rtol "$BTOL" >"$T/r18run.out" 2>"$T/r18run.log" ||
    { cat "$T/r18run.out" "$T/r18run.log"; fail "kiln run of resnet18 bf16 exited $?"; }
grep "^output matches the naive build" "$T/r18run.out" || fail "resnet18: no match line"
echo PASS
