#!/usr/bin/env bash
# onnx_models.sh - runs tools/onnx_models.py in a virtual environment of its
# own, made once and reused: ${KILN_MODELS_VENV:-$HOME/.cache/kiln-models-venv}
# with numpy, onnx, onnxruntime, onnxscript and CPU builds of torch and
# torchvision (from $KILN_TORCH_INDEX, default PyTorch's CPU wheel index; set
# it empty to take them from PyPI). small-cnn, small-cnn-int8, small-cnn-qop,
# int-ops and residual-cnn need only numpy, onnx and onnxruntime:
# KILN_MODELS_NO_TORCH=1 skips torch.
# Usage: tools/onnx_models.sh SUBCOMMAND ARGS...   (see tools/onnx_models.py)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${KILN_MODELS_VENV:-$HOME/.cache/kiln-models-venv}
index=${KILN_TORCH_INDEX-https://download.pytorch.org/whl/cpu}
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
