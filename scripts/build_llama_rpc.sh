#!/usr/bin/env bash
# Opt-in (not part of `make setup`): llama.cpp's RPC backend — `ggml-rpc-server` (its rpc-server) and `llama-bench` built
# with GGML_RPC=ON from the same llama.cpp the venv's llama-cpp-python pins (its sdist vendors
# it), with the CPU flags scripts/setup.sh uses. bench/shard_bench.py uses them to run llama.cpp's
# own layer split beside larql's. A second llama.cpp build: minutes on a few cores.
#
# Usage: scripts/build_llama_rpc.sh [OUT_DIR (default build/llama-rpc)] [SDIST.tar.gz]
# Without SDIST the pinned sdist is fetched with pip (`pip download --no-binary`).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/llama-rpc}
SDIST=${2:-}
JOBS=${JOBS:-2}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PIN=$(grep -o '^llama-cpp-python==[^ ]*' requirements-dev.txt)
if [ -z "$SDIST" ]; then
  .venv/bin/pip download -q --no-binary :all: --no-deps -d "$OUT/sdist" "$PIN"
  SDIST=$(ls "$OUT"/sdist/llama_cpp_python-*.tar.gz | head -1)
fi
SRC="$OUT/src"
if [ ! -f "$SRC/CMakeLists.txt" ]; then
  rm -rf "$SRC" && mkdir -p "$SRC"
  tar xzf "$SDIST" -C "$SRC" --strip-components=3 --wildcards '*/vendor/llama.cpp/*'
fi
# The CPU flags of scripts/setup.sh (no AMX: it segfaults on Sapphire Rapids with Q4_K_M).
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
args="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI avx512f:AVX512 \
            avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
  if [[ "$flags" == *" ${pair%%:*} "* ]]; then args+=" -DGGML_${pair##*:}=ON"; else args+=" -DGGML_${pair##*:}=OFF"; fi
done
# shellcheck disable=SC2086
cmake -S "$SRC" -B "$OUT/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER_LAUNCHER=$(command -v ccache || true) -DCMAKE_CXX_COMPILER_LAUNCHER=$(command -v ccache || true) -DGGML_RPC=ON -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF $args >/dev/null
cmake --build "$OUT/build" -j "$JOBS" --target ggml-rpc-server llama-bench
ls -l "$OUT/build/bin/ggml-rpc-server" "$OUT/build/bin/llama-bench"
