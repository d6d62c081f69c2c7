#!/usr/bin/env bash
# bench_model_sched.sh - ResNet-18 on the local CPU fleet with a fixed trial
# budget: total weighted latency with the gradient task scheduler vs
# round-robin (same budget, same seed, fresh stores), then both exported
# models run end to end against the naive build and oneDNN in the same
# `kiln run` (which checks every output before timing it).
#
# Usage: tools/bench/bench_model_sched.sh [BUDGET] [MODEL]
#   BUDGET  --max-trials-global of each run (default 864: 288 warm-up
#           trials for resnet18's 18 tasks x 16, then 576 the scheduler
#           chooses; ~25 min each on 2 cores), MODEL (default resnet18).
# Figures: total weighted latency of each scheduler (from the final summary
# table), the ratio gradient / round-robin (goal < 1), and the end-to-end
# latency of each exported model vs naive and oneDNN.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUDGET=${1:-864}
MODEL=${2:-resnet18}
KILN=${KILN:-build/tools/kiln}
[ -x "$KILN" ] || { echo "build first: tools/setup.sh" >&2; exit 2; }
T=$(mktemp -d "${TMPDIR:-/tmp}/kiln-bench-model-XXXXXX")
trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_PROC_BIND=${OMP_PROC_BIND:-close}

total() { # summary JSON -> total weighted latency in us
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["total_weighted_latency_us"])' "$1"
}

declare -A WL
for s in gradient round-robin; do
    start=$(date +%s)
    "$KILN" tune --model "$MODEL" --scheduler "$s" --seed 1 \
        --max-trials-global "$BUDGET" --trials-per-iter 16 \
        --db "$T/db-$s" --quiet --summary-json "$T/$s.json" \
        >"$T/$s.out" 2>"$T/$s.err" || { tail "$T/$s.err"; exit 1; }
    WL[$s]=$(total "$T/$s.json")
    echo "$s: total weighted latency ${WL[$s]} us after $BUDGET trials" \
         "($(( $(date +%s) - start )) s)"
done
python3 -c 'import sys; g,r=map(float,sys.argv[1:]); print("ratio gradient / round-robin: %.3f (goal < 1)" % (g/r))' \
    "${WL[gradient]}" "${WL[round-robin]}"

for s in gradient round-robin; do
    "$KILN" export --db "$T/db-$s" --model "$MODEL" --target cpu \
        --out "$T/out-$s" --fallback naive >"$T/export-$s.log" 2>&1 ||
        { tail "$T/export-$s.log"; exit 1; }
    echo "== $s: end to end (kiln run: kiln vs naive vs oneDNN, same run)"
    "$KILN" run --lib "$T/out-$s/libkiln_model.so" --model "$MODEL" \
        --repeat 10
done
echo "reproduce: tools/bench/bench_model_sched.sh $BUDGET $MODEL"
