#!/usr/bin/env bash
# --batch and --seq, a model's inputs resized, end to end on the command
# line (naive kernels: the store holds one simulated matmul record, as
# `kiln tune --op ... --simulate` makes it):
# - small_cnn.onnx exported with --batch 2 runs on two images, the
#   recorded one and another, and gives ONNX Runtime's output for the
#   first and the batch-1 library's output for the second; kiln run takes
#   the batch from the manifest, and a --batch that disagrees with it is
#   refused naming both;
# - bert_base exported with --seq 16 (the built-in's graph text resized)
#   runs against its own naive build at sequence 16;
# - tiny_gpt2.onnx and tiny_gpt2_nofold.onnx with --seq 8 are refused
#   (exit 2), naming the reshape whose shape their export wrote as a
#   constant (both traced the sequence length 16: neither has dynamic
#   axes), and their own --seq 16 imports;
# - tiny_gpt2_dyn.onnx (its sequence axis dynamic) exported with --seq 8
#   gives ONNX Runtime's output for an 8-token input;
# - --seq on a 4-D input, N=0, and --batch with --op or without --model
#   are usage errors (exit 2) that say what is wrong.
#
# SKIP (77) only while the ONNX test data is not in the tree.
. "$(dirname "$0")/lib.sh"
D=$(cd "$(dirname "$0")/../data/onnx" 2>/dev/null && pwd)
NPY=(python3 "$(dirname "$0")/npy_tool.py")
for f in small_cnn.onnx small_cnn.input.npy small_cnn.ort.npy tiny_gpt2.onnx \
    tiny_gpt2_nofold.onnx tiny_gpt2_dyn.onnx tiny_gpt2_dyn.input8.npy \
    tiny_gpt2_dyn.ort8.npy; do
    [ -n "$D" ] && [ -s "$D/$f" ] || {
        echo "SKIP: tests/data/onnx/$f is not in the tree"; exit 77; }
done
command -v "${CC:-cc}" >/dev/null || { echo "SKIP: no C compiler"; exit 77; }

# expect_usage WHAT TEXT CMD...: CMD exits 2 and its stderr says TEXT.
expect_usage() {
    local what=$1 text=$2 rc=0
    shift 2
    "$@" >"$T/usage.out" 2>"$T/usage.log" || rc=$?
    [ "$rc" -eq 2 ] || fail "$what: exit $rc, expected 2: $(cat "$T/usage.log")"
    grep -qF -- "$text" "$T/usage.log" ||
        fail "$what: stderr does not say '$text': $(cat "$T/usage.log")"
}

"$KILN" tune --op "matmul M=4 N=4 K=4" --simulate --max-trials-per-task 1 \
    --db "$T/db" --quiet >"$T/tune.out" 2>"$T/tune.log" ||
    fail "kiln tune --simulate exited $?"

# ---- small_cnn.onnx at batch 2 against ONNX Runtime and batch 1 ----
CNN=$D/small_cnn.onnx
"$KILN" extract --model "$CNN" --batch 2 >"$T/cnn.extract" 2>&1 ||
    fail "kiln extract --batch 2 exited $?: $(cat "$T/cnn.extract")"
grep -q "conv2d N=2 C=3 H=32 W=32 K=16 " "$T/cnn.extract" ||
    fail "extract --batch 2: the first conv is not at batch 2: $(cat "$T/cnn.extract")"
"$KILN" export --db "$T/db" --model "$CNN" --fallback naive --out "$T/cnn1" \
    >"$T/cnn1.out" 2>"$T/cnn1.log" || fail "kiln export (batch 1) exited $?"
"$KILN" export --db "$T/db" --model "$CNN" --batch 2 --fallback naive \
    --out "$T/cnn2" >"$T/cnn2.out" 2>"$T/cnn2.log" ||
    fail "kiln export --batch 2 exited $?: $(cat "$T/cnn2.log")"
grep -q '"batch":2' "$T/cnn2/manifest.json" || fail "the manifest does not say batch 2"
grep -q '"seq"' "$T/cnn2/manifest.json" && fail "the manifest has a seq nobody gave"
grep -q '"batch"' "$T/cnn1/manifest.json" && fail "the batch-1 manifest has a batch"
# a second image, and the batch-1 library's output for it
"${NPY[@]}" write "$T/z.npy" '<f4' 1x3x32x32
"$KILN" run --lib "$T/cnn1/libkiln_model.so" --model "$CNN" --repeat 1 \
    --no-dnnl --input "$T/z.npy" --output "$T/yz.npy" >"$T/run1.out" \
    2>"$T/run1.log" || fail "kiln run (batch 1) exited $?: $(cat "$T/run1.log")"
"${NPY[@]}" cat "$T/x2.npy" "$D/small_cnn.input.npy" "$T/z.npy"
"${NPY[@]}" cat "$T/y2.npy" "$D/small_cnn.ort.npy" "$T/yz.npy"
"$KILN" run --lib "$T/cnn2/libkiln_model.so" --model "$CNN" --repeat 1 \
    --no-dnnl --input "$T/x2.npy" --expect "$T/y2.npy" --rtol 1e-4 \
    >"$T/run2.out" 2>"$T/run2.log" ||
    fail "kiln run (batch 2) exited $?: $(cat "$T/run2.log")"
grep -q "^input dimensions: --batch 2 (.*manifest.json)" "$T/run2.out" ||
    fail "kiln run did not take the batch from the manifest: $(cat "$T/run2.out")"
grep -q "^output matches the naive build" "$T/run2.out" ||
    fail "batch 2: no match line against the naive build"
grep -q "^output matches $T/y2.npy: 20 elements" "$T/run2.out" ||
    fail "batch 2: no match line against ONNX Runtime and batch 1: $(cat "$T/run2.out")"
expect_usage "kiln run --batch 3 on a batch-2 library" \
    "--batch 3, but $T/cnn2/manifest.json says batch 2" \
    "$KILN" run --lib "$T/cnn2/libkiln_model.so" --model "$CNN" --batch 3 \
    --no-dnnl
expect_usage "kiln run --batch 2 on a library of the model's own size" \
    "--batch 2, but $T/cnn1/manifest.json has no \"batch\"" \
    "$KILN" run --lib "$T/cnn1/libkiln_model.so" --model "$CNN" --batch 2 \
    --no-dnnl

# ---- bert_base at sequence 16: graph text resized ----
"$KILN" extract --model bert_base --seq 16 --json >"$T/bert.json" 2>&1 ||
    fail "kiln extract bert_base --seq 16 exited $?"
grep -q '"seq":16' "$T/bert.json" || fail "extract --json does not say seq 16"
grep -q '"workload":"dense N=16 I=768 O=768 bias=1"' "$T/bert.json" ||
    fail "bert_base --seq 16: no dense N=16 task: $(cat "$T/bert.json")"
"$KILN" export --db "$T/db" --model bert_base --seq 16 --fallback naive \
    --out "$T/bert" >"$T/bert.out" 2>"$T/bert.log" ||
    fail "kiln export bert_base --seq 16 exited $?: $(cat "$T/bert.log")"
grep -q '"seq":16' "$T/bert/manifest.json" || fail "the manifest does not say seq 16"
"$KILN" run --lib "$T/bert/libkiln_model.so" --model bert_base --seq 16 \
    --repeat 1 --no-dnnl >"$T/bertrun.out" 2>"$T/bertrun.log" ||
    fail "kiln run bert_base --seq 16 exited $?: $(cat "$T/bertrun.log")"
grep -q "^output matches the naive build: 12288 elements" "$T/bertrun.out" ||
    fail "bert_base --seq 16: no match against its naive build: $(cat "$T/bertrun.out")"
expect_usage "kiln run --seq 32 on a seq-16 library" \
    "--seq 32, but $T/bert/manifest.json says seq 16" \
    "$KILN" run --lib "$T/bert/libkiln_model.so" --model bert_base --seq 32 \
    --no-dnnl
expect_usage "bert_base --batch 2 (one sequence)" \
    "layer 'x.seq': reshape of" \
    "$KILN" extract --model bert_base --batch 2

# ---- GPT-2 exports whose sequence length is a constant ----
for m in tiny_gpt2 tiny_gpt2_nofold; do
    expect_usage "$m.onnx --seq 8" \
        "$D/$m.onnx: with --seq 8: layer '_h_h.0_attn_Reshape_output_0': reshape of 512 elements to 1x16x4x16" \
        "$KILN" export --db "$T/db" --model "$D/$m.onnx" --seq 8 \
        --fallback naive --out "$T/$m"
    [ -e "$T/$m/manifest.json" ] && fail "$m.onnx --seq 8 wrote a manifest"
    grep -q "export it with dynamic axes" "$T/usage.log" ||
        fail "$m.onnx --seq 8: the error does not say how to resize it"
    "$KILN" extract --model "$D/$m.onnx" --seq 16 >"$T/$m.extract" 2>&1 ||
        fail "$m.onnx --seq 16 (its own) exited $?: $(cat "$T/$m.extract")"
done

# ---- a GPT-2 exported with a dynamic sequence axis ----
# Its shapes are computed from Shape in the graph, its causal mask from
# ConstantOfShape and Trilu: at --seq 8 the library gives ONNX Runtime's
# output for an 8-token input (kiln run takes the seq from the manifest).
G=$D/tiny_gpt2_dyn
"$KILN" export --db "$T/db" --model "$G.onnx" --seq 8 --fallback naive \
    --out "$T/dyn" >"$T/dyn.export.out" 2>"$T/dyn.export.log" ||
    fail "tiny_gpt2_dyn --seq 8: kiln export exited $?: $(cat "$T/dyn.export.log")"
grep -q '"seq":8' "$T/dyn/manifest.json" || fail "the manifest does not say seq 8"
"$KILN" run --lib "$T/dyn/libkiln_model.so" --model "$G.onnx" --repeat 1 \
    --no-dnnl --input "$G.input8.npy" --expect "$G.ort8.npy" --rtol 1e-4 \
    >"$T/dyn.run.out" 2>"$T/dyn.run.log" ||
    fail "tiny_gpt2_dyn at seq 8 against ONNX Runtime exited $?: $(cat "$T/dyn.run.log")"
grep -q "^output matches $G.ort8.npy: 512 elements" "$T/dyn.run.out" ||
    fail "tiny_gpt2_dyn: no match line: $(cat "$T/dyn.run.out")"

# ---- usage ----
expect_usage "--seq on a 4-D input" \
    "resnet18:8: --seq 8: input 'data' is 1x3x224x224 (4-D); --seq sets dimension 1 of a 2-D [batch, seq] or 3-D [batch, seq, hidden] input" \
    "$KILN" extract --model resnet18 --seq 8
expect_usage "--seq on a 4-D ONNX input" \
    "input 'x' is [1, 3, 32, 32] (4-D)" \
    "$KILN" export --db "$T/db" --model "$CNN" --seq 4 --fallback naive \
    --out "$T/no"
expect_usage "--batch 0" "--batch: 0 is out of range [1," \
    "$KILN" extract --model resnet18 --batch 0
expect_usage "--seq 0" "--seq: 0 is out of range [1," \
    "$KILN" tune --model bert_base --seq 0 --simulate --db "$T/db2"
expect_usage "--batch with --op" "--batch and --seq go with --model" \
    "$KILN" tune --op "matmul M=4 N=4 K=4" --batch 2 --simulate --db "$T/db2"
expect_usage "kiln export --op --seq" "--batch and --seq go with --model" \
    "$KILN" export --db "$T/db" --op "matmul M=4 N=4 K=4" --seq 2 --out "$T/no"
expect_usage "kiln report --batch without --model" \
    "--batch and --seq go with --model" \
    "$KILN" report --db "$T/db" --batch 2 --html "$T/r.html"
echo PASS
