#!/usr/bin/env bash
# peers.sh - one ONNX model end to end in ONNX Runtime, OpenVINO and (with
# --lib) kiln's exported library, timed side by side in one process by
# tools/bench/peers.py (which says what is measured and how).
#
# Usage: tools/bench/peers.sh FILE.onnx [--lib DIR/libkiln_model.so]
#            [--lib-bf16 DIR/libkiln_model.so] [--threads 2] [--runs 50]
#            [--warmup 10] [--input x.npy] [--seed 0] [--rtol 1e-4]
#            [--bf16-rtol 2e-2] [--accuracy N] [--no-ov-default]
#            [--settle 1] [--gap 0.3] [--json OUT.json]
# Rows: onnxruntime, openvino (f32), openvino-default (its own precision,
# bf16 on a CPU with AVX512-BF16 or AMX), kiln, kiln-bf16 (a library
# exported with --precision bf16).
# The Python packages (numpy, onnx, onnxruntime, openvino) live in a virtual
# environment of the benchmark's own, made on the first run and reused:
# ${KILN_BENCH_VENV:-$HOME/.cache/kiln-bench-venv}. kiln's library runs
# OpenMP threads: OMP_NUM_THREADS is set to --threads and OMP_PROC_BIND to
# close unless already set (docs/benchmarking.md), before Python starts.
# Exit: 0; 1 when an output disagrees with ONNX Runtime's; 2 usage.
# Models to run: tools/onnx_models.py; figures: docs/benchmarks.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -lt 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
    [ $# -ge 1 ] && exit 0 || exit 2
fi
threads=2
prev=""
for a in "$@"; do
    case "$prev" in --threads) threads=$a ;; esac
    case "$a" in --threads=*) threads=${a#--threads=} ;; esac
    prev=$a
done

venv=${KILN_BENCH_VENV:-$HOME/.cache/kiln-bench-venv}
py="$venv/bin/python"
if ! "$py" -c 'import numpy, onnx, onnxruntime, openvino' 2>/dev/null; then
    echo "peers.sh: making the virtual environment $venv" >&2
    python3 -m venv "$venv"
    "$py" -m pip install -q --upgrade pip >&2
    "$py" -m pip install -q numpy onnx onnxruntime openvino >&2
fi
export OMP_NUM_THREADS=$threads
export OMP_PROC_BIND=${OMP_PROC_BIND:-close}
echo "# reproduce: tools/bench/peers.sh $*"
exec "$py" "$here/peers.py" "$@"
