#!/usr/bin/env bash
# Writes what kiln's code generators produce for a fixed set of inputs into
# one folder, so that a restructuring of the generators, the schedule or the
# export can be checked byte for byte against the tree before it:
#
#   tools/codegen_snapshot.sh BUILD_DIR OUT_DIR [STORE_DIR]
#   diff -r before/ after/     # empty when nothing the user sees changed
#
# OUT_DIR gets:
#   space_*.txt   kiln space --samples 30 --seed 5 for matmul, conv2d, an
#                 int8 matmul and a winograd-eligible conv, on cpu, the
#                 AVX-512 + VNNI target and cuda/sm_90
#   replay.txt    a seeded kiln tune --op --strategy replay --simulate: its
#                 traces and their sources (simulated latencies, no timing)
#   resnet18_*    kiln export --model resnet18 --no-build from STORE_DIR
#                 (the generated sources, manifest and weights)
# STORE_DIR is made on the first call (2 real trials per ResNet-18 task on
# this machine) and reused as given afterwards, so that export reads the
# same records before and after; pass the same STORE_DIR both times.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BUILD_DIR OUT_DIR [STORE_DIR]" >&2; exit 2; }
B=$(cd "$1" && pwd)
OUT=$2
STORE=${3:-$OUT.store}
KILN=$B/tools/kiln
export KILN_RUNNER=$B/agent/kiln-runner
mkdir -p "$OUT"

ops=(
    "matmul M=128 N=128 K=128"
    "conv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 pad=1 bias=1 relu=1"
    "qmatmul M=64 N=64 K=128"
    "qconv2d N=1 C=64 H=28 W=28 K=64 R=3 S=3 pad=1"
    "matmul M=64 N=64 K=64 in=bf16"
    "conv2d N=1 C=32 H=14 W=14 K=32 R=3 S=3 pad=1"
)
targets=(cpu/x86_64-avx512 cpu/x86_64-avx512+vnni cpu/x86_64-avx2 cuda/sm_90)
i=0
for op in "${ops[@]}"; do
    for t in "${targets[@]}"; do
        f="$OUT/space_${i}_${t//\//_}.txt"
        { echo "# kiln space --op \"$op\" --target $t --samples 30 --seed 5"
          "$KILN" space --op "$op" --target "$t" --samples 30 --seed 5 2>&1 ||
              echo "exit $?"; } >"$f"
    done
    i=$((i + 1))
done

# A seeded replay: simulated agents answer, so the traces (and their
# sources) depend only on the seed, not on this machine's timings.
R=$(mktemp -d)
trap 'rm -rf "$R"' EXIT
"$KILN" tune --op "matmul M=64 N=64 K=64" --strategy replay --simulate \
    --max-trials-per-task 24 --trials-per-iter 8 --seed 3 --db "$R/db" \
    --quiet >"$R/tune.out" 2>"$R/tune.log" || { cat "$R/tune.log"; exit 1; }
src=$(sed -n 's/^source *//p' "$R/tune.out")
sed 's/^source .*/source (path)/' "$R/tune.out" >"$OUT/replay.txt"
[ -f "$src" ] && cat "$src" >>"$OUT/replay.txt"
"$KILN" db export --db "$R/db" |
    sed -n 's/.*"type":"record".*"trace":\("[^"]*\)".*/\1/p' | sort >>"$OUT/replay.txt"

if [ ! -d "$STORE" ]; then
    "$KILN" tune --model resnet18 --max-trials-per-task 2 --trials-per-iter 2 \
        --strategy replay --seed 1 --db "$STORE" --quiet --repeat 2 \
        --min-repeat-ms 0 --timeout-ms 10000 --no-flush \
        >"$R/r18.out" 2>"$R/r18.log" || { tail "$R/r18.log"; exit 1; }
fi
"$KILN" export --db "$STORE" --model resnet18 --out "$R/resnet18" --no-build \
    >"$R/export.log" 2>&1 || { cat "$R/export.log"; exit 1; }
# The paths the export names (its output folder) are the only lines that
# differ between two folders; the rest is compared as written.
for f in "$R/resnet18"/* "$R/export.log"; do
    sed "s#$R/resnet18#OUT#g" "$f" >"$OUT/resnet18_$(basename "$f")"
done
echo "snapshot in $OUT ($(find "$OUT" -type f | wc -l) files; store $STORE)"
