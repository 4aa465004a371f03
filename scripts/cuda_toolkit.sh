#!/usr/bin/env bash
# Puts a CUDA 13.0 compiler into .cuda/ (git-ignored) from NVIDIA's wheels on the Python package
# index (nvcc, the runtime's headers and static library, CCCL, NVVM), for machines without the
# CUDA toolkit: enough to build the CUDA backend (docs/backends.md). Prints the prefix.
set -euo pipefail
cd "$(dirname "$0")/.."
P=$PWD/.cuda
if [ ! -x "$P/nvidia/cu13/bin/nvcc" ]; then
  PY=${PYTHON:-.venv/bin/python}
  "$PY" -m pip install -q --no-deps --target "$P" \
    "nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-cccl==13.0.*" \
    "nvidia-cuda-crt==13.0.*" "nvidia-nvvm==13.0.*" >&2
  # nvcc looks for lib64/, CMake's FindCUDAToolkit for an unversioned libcudart.so.
  ln -sfn lib "$P/nvidia/cu13/lib64"
  ln -sfn libcudart.so.13 "$P/nvidia/cu13/lib/libcudart.so"
fi
echo "$P/nvidia/cu13"
