#!/usr/bin/env bash
# Packs what bench/gpu/device_run.sh needs into .gpu/ (git-ignored; carried to the GPU machine):
# the CUDA build's binaries (stripped) with every shared library they load (and this glibc's
# loader, for hosts with an older one), the default model's metadata, and llama.cpp's sources from
# the llama-cpp-python sdist (tests, docs and other backends left out).
#   bench/gpu/make_payload.sh BUILD_DIR LLAMA_CPP_PYTHON_SDIST.tar.gz
set -euo pipefail
B=${1:?build dir (configured with -DLARQL_CUDA=ON)}; SDIST=${2:?llama-cpp-python sdist}
T=$(mktemp -d); trap 'rm -rf $T' EXIT
mkdir -p $T/p/bin $T/p/lib .gpu
cmake --build "$B" --target larql larql_gpu_check larql_synth_gemma3
cp "$B/larql" "$B/larql_gpu_check" "$B/larql_synth_gemma3" $T/p/bin/ && strip -s $T/p/bin/*
for b in $T/p/bin/*; do ldd "$b" | awk '/=>/ {print $3} /ld-linux/ {print $1}'; done | sort -u | grep -v vdso |
  while read -r l; do [ -f "$l" ] && cp -L "$l" $T/p/lib/; done
"$B/larql_synth_gemma3" models/gemma-3-270m-q4_k_m.gguf vocab $T/p/vocab.gguf
tar cJf .gpu/payload.tar.xz -C $T/p bin lib vocab.gguf
mkdir -p $T/ll && tar xzf "$SDIST" -C $T/ll
L=$(echo $T/ll/*/vendor/llama.cpp)
rm -rf $L/{docs,models,benches,media,conversion,gguf-py,grammars,skills,tools/ui} $L/examples/*/*
for d in vulkan sycl metal cann opencl musa kompute webgpu zdnn hip rpc blas hexagon openvino virtgpu et zendnn; do
  rm -rf $L/ggml/src/ggml-$d
done
tar cJf .gpu/llama_src.tar.xz -C $(dirname $L) llama.cpp
ls -la .gpu
