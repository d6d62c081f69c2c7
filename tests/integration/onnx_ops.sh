#!/usr/bin/env bash
# The ONNX op families PyTorch exports, end to end against ONNX Runtime:
# each committed model of tests/data/onnx (element-wise ops with
# broadcasting, shape ops, a causal-mask attention core, the activation
# family, a tiny EfficientNet with and without its BatchNormalizations, a
# tiny GPT-2 decoder exported with and without constant folding, a tiny
# nn.TransformerEncoder) is
# imported, exported with its own weights (kiln export --fallback naive:
# the reference kernels, so no tuning is needed) and run by kiln run on
# its recorded input; the output must match ONNX Runtime's within 1e-4 of
# its largest magnitude. One of them, the tiny EfficientNet, is also tuned
# on a local fleet (one real kiln-agent, a tiny replay budget) and its
# tuned library must match too: its f32 values NHWC (the default for it),
# and once more NCHW (KILN_LAYOUT_F32=NCHW). kiln run refuses a library
# exported in other layouts than its own naive build. A malformed model is refused with an
# error that names the problem and exits 2.
#
# SKIP (77) only while the test data is not in the tree.
. "$(dirname "$0")/lib.sh"
D=$(cd "$(dirname "$0")/../data/onnx" 2>/dev/null && pwd)
MODELS="ew_broadcast shape_ops mask_ops act_ops tiny_efficientnet
tiny_efficientnet_folded tiny_gpt2 tiny_gpt2_nofold tiny_encoder"
for m in $MODELS; do
    in=${m%_folded}; in=${in%_nofold}
    for f in "$D/$m.onnx" "$D/$in.input.npy" "$D/$m.ort.npy"; do
        [ -n "$D" ] && [ -s "$f" ] || {
            echo "SKIP: tests/data/onnx/$(basename "$f") is not in the tree"; exit 77; }
    done
done
command -v "${CC:-cc}" >/dev/null || { echo "SKIP: no C compiler"; exit 77; }

# A store with no record of these models (a simulated tune of another op
# makes it): every task takes the reference kernel.
"$KILN" tune --op "matmul M=4 N=4 K=4" --simulate --max-trials-per-task 1 \
    --db "$T/empty-db" --quiet >"$T/sim.out" 2>"$T/sim.log" ||
    fail "kiln tune --simulate exited $?"
for m in $MODELS; do
    in=${m%_folded}; in=${in%_nofold}
    "$KILN" export --model "$D/$m.onnx" --target cpu --fallback naive \
        --db "$T/empty-db" --out "$T/$m" >"$T/$m.export.out" 2>"$T/$m.export.log" ||
        fail "$m: kiln export exited $?: $(cat "$T/$m.export.log")"
    # shape_ops and act_ops keep no constant (theirs fold, or are GELU's)
    [ "$m" = shape_ops ] || [ "$m" = act_ops ] ||
        grep -q "^weights: the model's own ([1-9][0-9]* parameters)" "$T/$m.export.out" ||
        fail "$m: exported without its own weights: $(cat "$T/$m.export.out")"
    "$KILN" run --lib "$T/$m/libkiln_model.so" --model "$D/$m.onnx" \
        --repeat 1 --no-dnnl --input "$D/$in.input.npy" --output "$T/$m.y.npy" \
        --expect "$D/$m.ort.npy" --rtol 1e-4 >"$T/$m.run.out" 2>"$T/$m.run.log" ||
        fail "$m: kiln run against ONNX Runtime exited $?: $(cat "$T/$m.run.log")"
    grep -q "^output matches $D/$m.ort.npy: " "$T/$m.run.out" ||
        fail "$m: no match line against ONNX Runtime: $(cat "$T/$m.run.out")"
    d=$(python3 "$(dirname "$0")/npy_tool.py" maxdiff "$T/$m.y.npy" "$D/$m.ort.npy") ||
        fail "$m: the output file: $d"
    echo "$m: largest difference from ONNX Runtime $d"
done

# The layers without a task that compute e^x (softmax, sigmoid, silu,
# elu, gelu_tanh) are vector loops: kiln_model.c compiles without
# trapping math, so GCC turns kl_expf's clamps and NaN test into blends
# (with trapping math it keeps them as branches and the loops scalar, the
# encoder's softmax 5x slower). GCC's own report names no line calling
# e^x among the loops it left scalar for control flow, and names the
# softmax's and the sigmoid's among those it vectorized.
if "${CC:-cc}" -v 2>&1 | grep -q '^gcc version'; then
    for m in act_ops tiny_gpt2 tiny_encoder; do
        "${CC:-cc}" -O3 -march=native -fopenmp -fopt-info-vec-all -c \
            "$T/$m/kiln_model.c" -o "$T/$m.o" >"$T/$m.vec" 2>&1 ||
            fail "$m: kiln_model.c does not compile: $(tail -3 "$T/$m.vec")"
        for ln in $(grep 'not vectorized: control flow in loop' "$T/$m.vec" |
                    cut -d: -f2 | sort -un); do
            src=$(sed -n "${ln}p" "$T/$m/kiln_model.c")
            [[ "$src" == *exp* ]] && fail "$m: kiln_model.c:$ln is a scalar loop: $src"
        done
        vec=$(grep 'optimized: loop vectorized' "$T/$m.vec" | cut -d: -f2 | sort -un |
              while read -r ln; do sed -n "${ln}p" "$T/$m/kiln_model.c"; done)
        case $m in
        act_ops) want='S_ACT(sigmoid' ;;
        *) want='s_expf(a[j] - m)' ;;
        esac
        [[ "$vec" == *"$want"* ]] ||
            fail "$m: GCC did not vectorize the loop of $want: $(grep -c vectorized "$T/$m.vec") reports"
    done
else
    echo "not checked: the e^x loops' vectorization (${CC:-cc} is not GCC)"
fi

# GELU's tanh form, spelled out by the exporter (x*(x*x), Mul, Add, Tanh,
# ...), is one gelu layer per block, with no tanh layer left over.
"$KILN" extract --model "$D/tiny_gpt2.onnx" --print-graph >"$T/gpt2.graph" 2>&1 ||
    fail "kiln extract --print-graph tiny_gpt2 exited $?"
[ "$(grep -c ' = gelu .* approximate=tanh$' "$T/gpt2.graph")" -eq 2 ] ||
    fail "tiny_gpt2: not two gelu approximate=tanh layers: $(grep -c gelu "$T/gpt2.graph")"
grep -q ' = tanh ' "$T/gpt2.graph" && fail "tiny_gpt2: a tanh layer is left"
# The packed QKV projection's Split is three matmuls (the weight's
# columns), not the packed one and three copies.
[ "$(grep -c '_Split_output_[0-2] = matmul .* N=64 bias=1$' "$T/gpt2.graph")" -eq 6 ] ||
    fail "tiny_gpt2: the Splits are not six matmuls: $(grep Split "$T/gpt2.graph")"
grep -q ' = slice ' "$T/gpt2.graph" && fail "tiny_gpt2: a slice layer is left"

# Both residual adds of each encoder layer fold into the projection that
# produces them: the feed-forward's matmul, and the attention's output
# projection (a dense), whose output reaches the add through a Reshape and
# a Transpose of a size-1 dimension. No add is left as a task of its own.
"$KILN" extract --model "$D/tiny_encoder.onnx" >"$T/enc.tasks" 2>&1 ||
    fail "kiln extract tiny_encoder exited $?"
grep -q '| dense N=8 I=32 O=32 bias=1 residual=1$' "$T/enc.tasks" ||
    fail "tiny_encoder: the attention's residual is not fused: $(cat "$T/enc.tasks")"
grep -q '| matmul M=8 N=32 K=64 const_b=1 bias=1 residual=1$' "$T/enc.tasks" ||
    fail "tiny_encoder: the feed-forward's residual is not fused: $(cat "$T/enc.tasks")"
grep -q '| add ' "$T/enc.tasks" && fail "tiny_encoder: an add task is left"

# The tiny EfficientNet tuned runs the same. Its f32 values are NHWC by
# the per-graph rule (kl_model_layout.c): its convolutions and depthwise
# convolutions are layout=NHWC tasks (the depthwise kernels of the channel
# family), and its squeeze-excite's pools are reductions of the export
# over NHWC values, not tasks. Again with KILN_LAYOUT_F32=NCHW (its pools
# then tasks), whose store does not export the default tasks and whose
# library kiln run refuses in the default environment.
flags=$(grep -m1 '^flags' /proc/cpuinfo)
if [[ " $flags " == *" avx512f "* ]]; then TGT=cpu/x86_64-avx512
elif [[ " $flags " == *" avx2 "* && " $flags " == *" fma "* ]]; then TGT=cpu/x86_64-avx2
else TGT=; fi
if [ -n "$TGT" ]; then
    m=tiny_efficientnet
    # $1: the layout's word ("" for the rule), $2: the directory suffix
    tuned() {
        KILN_LAYOUT_F32=$1 "$KILN" extract --model "$D/$m.onnx" >"$T/$2.tasks" 2>&1 ||
            fail "kiln extract $m (KILN_LAYOUT_F32=$1) exited $?"
        KILN_LAYOUT_F32=$1 "$KILN" tune --model "$D/$m.onnx" --target "$TGT" \
            --max-trials-per-task 3 --trials-per-iter 3 --db "$T/db_$2" \
            --strategy replay --quiet --repeat 3 --min-repeat-ms 0 \
            --timeout-ms 5000 --no-flush >"$T/tune_$2.out" 2>"$T/tune_$2.log" ||
            fail "kiln tune --model $m.onnx (KILN_LAYOUT_F32=$1) exited $?"
        KILN_LAYOUT_F32=$1 "$KILN" export --db "$T/db_$2" --model "$D/$m.onnx" \
            --target cpu --out "$T/$2" >"$T/$2.export.out" 2>"$T/$2.export.log" ||
            fail "kiln export of $m (KILN_LAYOUT_F32=$1) exited $?: $(cat "$T/$2.export.log")"
        KILN_LAYOUT_F32=$1 "$KILN" run --lib "$T/$2/libkiln_model.so" \
            --model "$D/$m.onnx" --repeat 1 --no-dnnl --input "$D/$m.input.npy" \
            --expect "$D/$m.ort.npy" --rtol 1e-4 >"$T/$2.run.out" 2>"$T/$2.run.log" ||
            fail "the tuned $m (KILN_LAYOUT_F32=$1) against ONNX Runtime exited $?: $(cat "$T/$2.run.log")"
    }
    tuned "" nhwc
    grep -q '| depthwise_conv2d .* layout=NHWC$' "$T/nhwc.tasks" ||
        fail "$m: no NHWC depthwise task: $(cat "$T/nhwc.tasks")"
    grep -q '| conv2d .* R=1 S=1 .* layout=NHWC$' "$T/nhwc.tasks" ||
        fail "$m: no NHWC 1x1 conv2d task: $(cat "$T/nhwc.tasks")"
    grep -q '| avg_pool2d ' "$T/nhwc.tasks" &&
        fail "$m with NHWC values: a pool task is left: $(cat "$T/nhwc.tasks")"
    grep -q 'channel vectors' "$T"/nhwc/task_*.c ||
        fail "$m with NHWC values: no depthwise kernel of the channel family"
    grep -q '^    s_to_nchw(' "$T/nhwc/kiln_model.c" &&
        fail "$m with NHWC values: a value is converted back to NCHW"
    tuned NCHW nchw
    grep -q 'layout=NHWC' "$T/nchw.tasks" &&
        fail "$m with KILN_LAYOUT_F32=NCHW: an NHWC task: $(cat "$T/nchw.tasks")"
    grep -q '| avg_pool2d ' "$T/nchw.tasks" ||
        fail "$m with KILN_LAYOUT_F32=NCHW: no pool task: $(cat "$T/nchw.tasks")"
    # The NCHW store does not export the default (NHWC) tasks: loud.
    "$KILN" export --db "$T/db_nchw" --model "$D/$m.onnx" --target cpu \
        --out "$T/nhwc_from_nchw" >"$T/x.out" 2>"$T/x.log" &&
        fail "an NCHW store exported the NHWC tasks without a word"
    # kiln run in another environment than the export's: the library's
    # weights are [K,C,R,S], the naive build's [R,S,C,K]; an error that
    # says so, not a wrong comparison.
    "$KILN" run --lib "$T/nchw/libkiln_model.so" --model "$D/$m.onnx" \
        --repeat 1 --no-dnnl >"$T/x.out" 2>"$T/x.log" &&
        fail "kiln run compared an NCHW library with the NHWC naive build"
    grep -q "in the naive build of .*other value layouts (KILN_LAYOUT_F32" "$T/x.log" ||
        fail "kiln run, layouts differing: $(cat "$T/x.log")"
fi

# A truncated model: a clear error, exit 2, nothing written.
head -c 3000 "$D/tiny_gpt2.onnx" >"$T/cut.onnx"
"$KILN" extract --model "$T/cut.onnx" >"$T/cut.out" 2>"$T/cut.log"
rc=$?
[ "$rc" -eq 2 ] || fail "a truncated model: exit $rc, not 2"
grep -q "not an ONNX model\|truncated\|does not decode" "$T/cut.log" ||
    fail "a truncated model: $(cat "$T/cut.log")"
echo PASS
