#!/usr/bin/env bash
# Quantized ONNX models end to end on a local fleet: the CPU design space
# tensorizes the qconv2d layers (codegen_tensorize_conv.c), NHWC where C
# is a multiple of 4, at least 16 (kl_model_layout.c; the C = 3 first
# layers NCHW, X repacked per call into a padded channels-last scratch),
# and the export converts values between the layouts where needed.
# - small_cnn_int8.onnx: `kiln tune --model` tunes its qconv2d tasks and
#   skips its depthwise one (no design space) with a warning that names it,
#   instead of stopping; `kiln export --fallback naive` gives that one the
#   reference kernel.
# - residual_cnn_qdq.onnx: every task tuned (four qconv2d, three NHWC);
#   its max pool and residual add are integer shortcuts (no task).
# Each exported library runs on the recorded input and its output matches
# the naive build and ONNX Runtime's (within a couple of output steps: a
# tuned f32 layer between a dequantize and a quantize may round one code
# differently; the q-ops themselves are exact, tensorize_conv_test.c).
. "$(dirname "$0")/lib.sh"
TEVAL=(--repeat 3 --min-repeat-ms 0 --timeout-ms 5000 --no-flush)
D=$(cd "$(dirname "$0")/../data/onnx" 2>/dev/null && pwd)
[ -n "$D" ] || { echo "SKIP: tests/data/onnx is not in the tree"; exit 77; }
grep -qw avx2 /proc/cpuinfo || { echo "SKIP: no AVX2 on this CPU"; exit 77; }
command -v "${CC:-cc}" >/dev/null || { echo "SKIP: no C compiler"; exit 77; }

run_model() {
    local m=$1 in=$2 ntask=$3 M="$T/$1"
    mkdir -p "$M"
    "$KILN" tune --model "$D/$m.onnx" --max-trials-per-task 2 \
        --trials-per-iter 2 --db "$M/db" --strategy replay --quiet \
        "${TEVAL[@]}" >"$M/tune.out" 2>"$M/tune.log" ||
        fail "kiln tune --model $m exited $?: $(tail -3 "$M/tune.log")"
    grep -q "model $m, $ntask tasks" "$M/tune.log" ||
        fail "$m: not $ntask tasks tuned: $(grep "model $m" "$M/tune.log")"
    # every qconv2d task of the table got its trials
    local nq
    nq=$(grep -cE '^ +[0-9]+ \| qconv2d_.* \| +2 \| yes' "$M/tune.out")
    [ "$nq" -ge 2 ] || { cat "$M/tune.out"; fail "$m: qconv2d tasks not tuned"; }
    "$KILN" export --db "$M/db" --model "$D/$m.onnx" --out "$M/out" \
        --fallback naive >"$M/export.out" 2>"$M/export.log" ||
        fail "kiln export $m exited $?: $(cat "$M/export.log")"
    "$KILN" run --lib "$M/out/libkiln_model.so" --model "$D/$m.onnx" \
        --repeat 3 --no-dnnl --input "$D/$in" --expect "$D/$m.ort.npy" \
        --rtol 0.02 >"$M/run.out" 2>"$M/run.log" ||
        fail "kiln run $m exited $?: $(cat "$M/run.out" "$M/run.log")"
    grep -q "^output matches the naive build" "$M/run.out" ||
        fail "$m: no match line against the naive build"
    grep -q "^output matches $D/$m.ort.npy" "$M/run.out" ||
        fail "$m: no match line against ONNX Runtime"
    grep "^output matches\|tasks, .* tuned" "$M/run.out" "$M/export.out"
}

run_model small_cnn_int8 small_cnn_int8.input.npy 5
# its depthwise task is tuned too (the depthwise row family in int32)
grep -qE '^ +[0-9]+ \| qdepthwise_conv2d_1_16_32_32_3_3_s1_p1_bias\b.* \| yes' \
    "$T/small_cnn_int8/tune.out" ||
    { cat "$T/small_cnn_int8/tune.out"; fail "small_cnn_int8: depthwise task not tuned"; }
grep -q "5 tasks, 5 tuned, 0 naive" "$T/small_cnn_int8/export.out" ||
    fail "small_cnn_int8: not every task tuned: $(cat "$T/small_cnn_int8/export.out")"

run_model residual_cnn_qdq residual_cnn.input.npy 7
grep -q "7 tasks, 7 tuned, 0 naive" "$T/residual_cnn_qdq/export.out" ||
    fail "residual_cnn_qdq: not every task tuned: $(cat "$T/residual_cnn_qdq/export.out")"
echo PASS
