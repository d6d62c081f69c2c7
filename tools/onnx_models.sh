#!/usr/bin/env bash
# onnx_models.sh - runs tools/onnx_models.py in a virtual environment of its
# own, made once and reused: ${KILN_MODELS_VENV:-$HOME/.cache/kiln-models-venv}
# with numpy, onnx, onnxruntime, onnxscript, torch and torchvision. torch
# and torchvision come from PyPI by default (KILN_TORCH_INDEX unset or
# empty): the machines kiln's data was made on reach PyPI but not
# download.pytorch.org. Where that index is reachable,
# KILN_TORCH_INDEX=https://download.pytorch.org/whl/cpu takes PyTorch's
# CPU-only wheels instead (much smaller than PyPI's, which bring CUDA
# libraries). The committed models were made with PyPI's torch 2.15.0 and
# torchvision 0.29.2 (`KILN_TORCH_INDEX= tools/onnx_models.sh ...`).
# small-cnn, small-cnn-int8, small-cnn-qop, int-ops, residual-cnn and ops
# need only numpy, onnx and onnxruntime: KILN_MODELS_NO_TORCH=1 skips torch.
# Usage: tools/onnx_models.sh SUBCOMMAND ARGS...   (see tools/onnx_models.py)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${KILN_MODELS_VENV:-$HOME/.cache/kiln-models-venv}
index=${KILN_TORCH_INDEX-}
py="$venv/bin/python"
if ! "$py" -c 'import numpy, onnx, onnxruntime' 2>/dev/null; then
    echo "onnx_models.sh: making $venv" >&2
    python3 -m venv "$venv"
    "$py" -m pip install -q --upgrade pip >&2
    "$py" -m pip install -q numpy onnx onnxruntime onnxscript >&2
fi
if [ "${KILN_MODELS_NO_TORCH:-0}" != 1 ] &&
   ! "$py" -c 'import torch, torchvision' 2>/dev/null; then
    echo "onnx_models.sh: installing torch and torchvision into $venv" >&2
    if [ -n "$index" ]; then
        "$py" -m pip install -q torch torchvision --index-url "$index" >&2
    else
        "$py" -m pip install -q torch torchvision >&2
    fi
fi
exec "$py" "$here/onnx_models.py" "$@"
