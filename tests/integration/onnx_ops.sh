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
# tuned library must match too, and once more with its f32 values NHWC
# (KILN_LAYOUT_F32=NHWC; by default its squeeze-excite keeps it NCHW).
# kiln run refuses a library exported in other layouts than its own
# naive build. A malformed model is refused with an
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
grep -q '| matmul M=8 N=32 K=64 bias=1 residual=1$' "$T/enc.tasks" ||
    fail "tiny_encoder: the feed-forward's residual is not fused: $(cat "$T/enc.tasks")"
grep -q '| add ' "$T/enc.tasks" && fail "tiny_encoder: an add task is left"

# The tiny EfficientNet tuned (its convolutions, depthwise ones and pools
# get records) runs the same.
flags=$(grep -m1 '^flags' /proc/cpuinfo)
if [[ " $flags " == *" avx512f "* ]]; then TGT=cpu/x86_64-avx512
elif [[ " $flags " == *" avx2 "* && " $flags " == *" fma "* ]]; then TGT=cpu/x86_64-avx2
else TGT=; fi
if [ -n "$TGT" ]; then
    m=tiny_efficientnet
    "$KILN" tune --model "$D/$m.onnx" --target "$TGT" --max-trials-per-task 2 \
        --trials-per-iter 2 --db "$T/db" --strategy replay --quiet \
        --repeat 3 --min-repeat-ms 0 --timeout-ms 5000 --no-flush \
        >"$T/tune.out" 2>"$T/tune.log" || fail "kiln tune --model $m.onnx exited $?"
    "$KILN" export --db "$T/db" --model "$D/$m.onnx" --target cpu --out "$T/tuned" \
        >"$T/tuned.export.out" 2>"$T/tuned.export.log" ||
        fail "kiln export of the tuned $m exited $?: $(cat "$T/tuned.export.log")"
    "$KILN" run --lib "$T/tuned/libkiln_model.so" --model "$D/$m.onnx" --repeat 1 \
        --no-dnnl --input "$D/$m.input.npy" --expect "$D/$m.ort.npy" --rtol 1e-4 \
        >"$T/tuned.run.out" 2>"$T/tuned.run.log" ||
        fail "the tuned $m against ONNX Runtime exited $?: $(cat "$T/tuned.run.log")"
    # With f32 values NHWC (KILN_LAYOUT_F32=NHWC): its convolutions and
    # depthwise convolutions are layout=NHWC tasks, their kernels the
    # channel-vector family and the generic tiling over NHWC, and the
    # tuned library runs the same.
    KILN_LAYOUT_F32=NHWC "$KILN" extract --model "$D/$m.onnx" >"$T/nhwc.tasks" 2>&1 ||
        fail "kiln extract $m with NHWC values exited $?"
    grep -q '| depthwise_conv2d .* layout=NHWC$' "$T/nhwc.tasks" ||
        fail "$m: no NHWC depthwise task: $(cat "$T/nhwc.tasks")"
    grep -q '| conv2d .* R=1 S=1 .* layout=NHWC$' "$T/nhwc.tasks" ||
        fail "$m: no NHWC 1x1 conv2d task: $(cat "$T/nhwc.tasks")"
    KILN_LAYOUT_F32=NHWC "$KILN" tune --model "$D/$m.onnx" --target "$TGT" \
        --max-trials-per-task 3 --trials-per-iter 3 --db "$T/db_nhwc" \
        --strategy replay --quiet --repeat 3 --min-repeat-ms 0 \
        --timeout-ms 5000 --no-flush >"$T/tune_nhwc.out" 2>"$T/tune_nhwc.log" ||
        fail "kiln tune --model $m.onnx with NHWC values exited $?"
    KILN_LAYOUT_F32=NHWC "$KILN" export --db "$T/db_nhwc" --model "$D/$m.onnx" \
        --target cpu --out "$T/nhwc" >"$T/nhwc.export.out" 2>"$T/nhwc.export.log" ||
        fail "kiln export of $m with NHWC values exited $?: $(cat "$T/nhwc.export.log")"
    grep -q 'channel vectors' "$T"/nhwc/task_*.c ||
        fail "$m with NHWC values: no depthwise kernel of the channel family"
    KILN_LAYOUT_F32=NHWC "$KILN" run --lib "$T/nhwc/libkiln_model.so" \
        --model "$D/$m.onnx" --repeat 1 --no-dnnl --input "$D/$m.input.npy" \
        --expect "$D/$m.ort.npy" --rtol 1e-4 >"$T/nhwc.run.out" 2>"$T/nhwc.run.log" ||
        fail "$m with NHWC values against ONNX Runtime exited $?: $(cat "$T/nhwc.run.log")"
    # The same store does not export the default tasks (NCHW: the tiny
    # EfficientNet's squeeze-excite would convert every expanded value):
    # loud.
    "$KILN" export --db "$T/db_nhwc" --model "$D/$m.onnx" --target cpu \
        --out "$T/nchw_from_nhwc" >"$T/x.out" 2>"$T/x.log" &&
        fail "an NHWC store exported the NCHW tasks without a word"
    # kiln run in another environment than the export's: the naive
    # build's weights are [K,C,R,S], the library's [R,S,C,K]; an error
    # that says so, not a wrong comparison.
    "$KILN" run --lib "$T/nhwc/libkiln_model.so" --model "$D/$m.onnx" \
        --repeat 1 --no-dnnl >"$T/x.out" 2>"$T/x.log" &&
        fail "kiln run compared an NHWC library with the NCHW naive build"
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
