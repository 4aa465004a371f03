#!/usr/bin/env bash
# Compiles the CUDA backend's device code and the GPU check program without a GPU (`make
# cuda-compile`, part of `make test`): nvcc from the system, else from scripts/cuda_toolkit.sh.
# Running them needs an NVIDIA GPU (bench/gpu/device_run.sh); this only proves they compile for
# sm_90 with no warnings.
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v nvcc >/dev/null; then NVCC=$(command -v nvcc); INC=$(dirname "$NVCC")/../include
else T=$(scripts/cuda_toolkit.sh); NVCC=$T/bin/nvcc; INC=$T/include; fi
O=$(mktemp -d); trap 'rm -rf $O' EXIT
for f in src/cuda/kernels.cu src/cuda/cuda_model.cu; do
  "$NVCC" -std=c++20 -O2 -arch=sm_90 --expt-relaxed-constexpr -Werror all-warnings -Isrc -c "$f" -o "$O/$(basename "$f").o"
done
c++ -std=c++20 -Wall -Wextra -Werror -Wno-unused-parameter -Isrc -I"$INC" -fsyntax-only tests/cuda/gpu_check.cc
echo "cuda-compile: src/cuda/*.cu and tests/cuda/gpu_check.cc compile for sm_90 ($("$NVCC" --version | tail -2 | head -1))"
