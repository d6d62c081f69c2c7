#!/usr/bin/env bash
# An ONNX model end to end against ONNX Runtime: tests/data/onnx/
# small_cnn.onnx is tuned here on a local fleet (one real kiln-agent, a
# tiny replay budget), exported with its own trained weights embedded in
# libkiln_model.so, and run by kiln run on the recorded input; its output
# must match ONNX Runtime's (small_cnn.ort.npy) within rtol 1e-4, and the
# library must work without kiln_model.weights beside it. The same model
# exported with --precision bf16 (its conv2d and dense tasks' in=bf16
# forms, naive kernels: none is tuned) keeps its own trained weights as
# f32 parameters and matches ONNX Runtime within the bf16 rtol 1.6e-2.
#
# SKIP (77) only while the test data is not in the tree; once it is, a
# model exported without its own weights (kl_model_params giving none) is
# a failure, never a skip.
. "$(dirname "$0")/lib.sh"
TEVAL=(--repeat 3 --min-repeat-ms 0 --timeout-ms 5000 --no-flush)
D=$(cd "$(dirname "$0")/../data/onnx" 2>/dev/null && pwd)
ONNX=$D/small_cnn.onnx IN=$D/small_cnn.input.npy ORT=$D/small_cnn.ort.npy
for f in "$ONNX" "$IN" "$ORT"; do
    [ -n "$D" ] && [ -s "$f" ] || {
        echo "SKIP: tests/data/onnx/$(basename "$f") is not in the tree"; exit 77; }
done
flags=$(grep -m1 '^flags' /proc/cpuinfo)
if [[ " $flags " == *" avx512f "* ]]; then
    TGT=cpu/x86_64-avx512
elif [[ " $flags " == *" avx2 "* && " $flags " == *" fma "* ]]; then
    TGT=cpu/x86_64-avx2
else
    echo "SKIP: no design space for this CPU's target"; exit 77
fi
command -v "${CC:-cc}" >/dev/null || { echo "SKIP: no C compiler"; exit 77; }

"$KILN" extract --model "$ONNX" >"$T/extract.out" 2>"$T/extract.log" ||
    fail "kiln extract of small_cnn.onnx exited $?"
"$KILN" tune --model "$ONNX" --target "$TGT" --max-trials-per-task 4 \
    --trials-per-iter 4 --db "$T/db" --strategy replay --quiet "${TEVAL[@]}" \
    >"$T/tune.out" 2>"$T/tune.log" || fail "kiln tune --model small_cnn.onnx exited $?"
"$KILN" export --db "$T/db" --model "$ONNX" --target cpu --out "$T/out" \
    >"$T/export.out" 2>"$T/export.log" || fail "kiln export exited $?"
grep -q "^weights: the model's own ([1-9][0-9]* parameters)" "$T/export.out" ||
    fail "small_cnn.onnx was exported without its own weights (kl_model_params gave none): $(cat "$T/export.out")"
rm "$T/out/kiln_model.weights" # the library carries them

"$KILN" run --lib "$T/out/libkiln_model.so" --model "$ONNX" --repeat 3 \
    --no-dnnl --input "$IN" --output "$T/y.npy" --expect "$ORT" --rtol 1e-4 \
    --profile >"$T/run.out" 2>"$T/run.log" ||
    fail "kiln run against ONNX Runtime exited $?: $(cat "$T/run.log")"
grep -q "^weights: the model's own, embedded in the library" "$T/run.out" ||
    fail "kiln run: not the model's own weights: $(cat "$T/run.out")"
grep -q "^output matches $ORT: " "$T/run.out" ||
    fail "kiln run: no match line against ONNX Runtime: $(cat "$T/run.out")"
grep -q "^output matches the naive build" "$T/run.out" ||
    fail "kiln run: no match line against the naive build"
grep -qE "^total: end-to-end median +[0-9.]+ ms" "$T/run.out" ||
    fail "kiln run --profile: no totals"
# The output file agrees with ONNX Runtime too, read back here.
d=$(python3 "$(dirname "$0")/npy_tool.py" maxdiff "$T/y.npy" "$ORT") ||
    fail "the output file: $d"
awk -v d="$d" 'BEGIN { exit !(d <= 1e-4) }' || fail "the output file is $d off ONNX Runtime's"

"$KILN" export --db "$T/db" --model "$ONNX" --target cpu --precision bf16 \
    --fallback naive --out "$T/out16" >"$T/export16.out" 2>"$T/export16.log" ||
    fail "kiln export --precision bf16 exited $?: $(cat "$T/export16.log")"
grep -q "^weights: the model's own ([1-9][0-9]* parameters)" "$T/export16.out" ||
    fail "bf16 export without the model's own weights: $(cat "$T/export16.out")"
grep -q '"precision":"bf16"' "$T/out16/manifest.json" || fail "the bf16 manifest does not say bf16"
"$KILN" run --lib "$T/out16/libkiln_model.so" --model "$ONNX" --repeat 1 \
    --no-dnnl --input "$IN" --expect "$ORT" --rtol 1.6e-2 \
    >"$T/run16.out" 2>"$T/run16.log" ||
    fail "kiln run of the bf16 library against ONNX Runtime exited $?: $(cat "$T/run16.log")"
grep "^output matches $ORT: " "$T/run16.out" || fail "bf16: no match line against ONNX Runtime"
echo PASS
