#!/usr/bin/env bash
# The CUDA backend's checks and timings on a GPU machine (docs/backends.md "Checking on a GPU").
# Runs from the repository root with the payload bench/gpu/make_payload.sh wrote into .gpu/
# (larql built with -DLARQL_CUDA=ON, larql_gpu_check, larql_synth_gemma3, their shared libraries,
# the default model's metadata, llama.cpp's sources). Results go to $OUT (default /tmp/gpu-out).
#   bench/gpu/device_run.sh [shapes...]      default: 270m 1b 4b
# SANITIZE=0 leaves out compute-sanitizer (minutes); LLAMA=0 leaves out llama.cpp; HF=0 transformers.
set -u
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
G=/tmp/larql-gpu
mkdir -p $G
tar xJf .gpu/payload.tar.xz -C $G
# The C runtime the payload carries is only for its own loader (below), never for the host's tools.
mkdir -p $G/sys
for f in libc.so.6 libm.so.6 ld-linux-x86-64.so.2 libstdc++.so.6 libgcc_s.so.1 libpthread.so.0 libdl.so.2 librt.so.1; do
  [ -f $G/lib/$f ] && mv $G/lib/$f $G/sys/
done
export LD_LIBRARY_PATH=$G/lib:${LD_LIBRARY_PATH:-}
# The payload was built against an older glibc than most hosts have; where the host's is older,
# run it through the payload's own loader.
RUN=""
if ! $G/bin/larql_synth_gemma3 2>&1 | grep -q usage; then
  RUN="$G/sys/ld-linux-x86-64.so.2 --library-path $G/sys:${LD_LIBRARY_PATH}"
  echo "using the payload's loader"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv
ldd --version | head -1; nproc
shapes=${*:-270m 1b 4b}

# llama.cpp with CUDA, built in the background from the llama-cpp-python sdist's sources.
[ "${LLAMA:-1}" = 1 ] && (
  mkdir -p /tmp/ll && tar xJf .gpu/llama_src.tar.xz -C /tmp/ll && cd /tmp/ll/llama.cpp &&
  cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DGGML_NATIVE=ON -DCMAKE_BUILD_TYPE=Release > "$OUT/llama_cfg.log" 2>&1 &&
  cmake --build build -j 10 --target llama-bench llama-batched-bench > "$OUT/llama_build.log" 2>&1
  echo "llama.cpp build: rc $?" > "$OUT/llama_build.rc"
) &
LLAMA_PID=$!

for s in $shapes; do
  t0=$(date +%s)
  $RUN $G/bin/larql_synth_gemma3 $G/vocab.gguf $s /tmp/$s.gguf 1 2>&1 | tr '\r' '\n' | tail -1
  echo "synth $s: $(( $(date +%s) - t0 )) s, $(stat -c %s /tmp/$s.gguf) bytes"
done

for s in $shapes; do
  echo "=== gpu_check $s"
  extra=""
  [ "$s" = 4b ] && extra="--bench"
  [ "$s" = 1b ] && extra="--bench"
  timeout 200 $RUN $G/bin/larql_gpu_check /tmp/$s.gguf $extra 2>&1 | tee "$OUT/gpu_check_$s.txt" | grep -v "^  prompt"
done

echo "=== larql run --device cuda (CLI path)"
timeout 60 $RUN $G/bin/larql run /tmp/270m.gguf "The capital of France is" -n 16 --temp 0 --ignore-eos --device cuda 2>&1 | tail -4
timeout 60 $RUN $G/bin/larql run /tmp/270m.gguf "The capital of France is" -n 16 --temp 0 --ignore-eos --device cpu 2>&1 | tail -4
timeout 60 $RUN $G/bin/larql run /tmp/270m.gguf "x" -n 4 --engine markov-rs --device cuda 2>&1 | tail -2

echo "=== larql bench --device cuda (the CLI path) on 4b"
timeout 120 $RUN $G/bin/larql bench /tmp/4b.gguf --device cuda --prompt-tokens 2048 --decode-tokens 128 2>&1 | tail -6
timeout 120 $RUN $G/bin/larql bench /tmp/4b.gguf --device cuda --batch 1,4,16 --prompt-tokens 16 --decode-tokens 32 2>&1 | tail -5

echo "=== transformers (random bf16 weights of the 4b shape, static cache)"
[ "${HF:-1}" = 1 ] && timeout 150 python3 bench/gpu/hf_bench.py 2>&1 | tail -8 | tee "$OUT/hf.txt"

for i in $(seq 1 "${LLAMA_WAIT:-240}"); do [ -f "$OUT/llama_build.rc" ] && break; sleep 1; done
cat "$OUT/llama_build.rc" 2>/dev/null; tail -3 "$OUT/llama_build.log"
LB=/tmp/ll/llama.cpp/build/bin
if [ -x $LB/llama-bench ]; then
  for s in ${LLAMA_SHAPES:-1b 4b}; do
    echo "=== llama.cpp CUDA on $s"
    timeout 200 $LB/llama-bench -m /tmp/$s.gguf -ngl 99 -p 2048 -n 128 -r 2 -o md 2>&1 | grep -E "^\|" | tee -a "$OUT/llama_bench.txt"
  done
  timeout 200 $LB/llama-batched-bench -m /tmp/4b.gguf -ngl 99 -c 8192 -npp 16 -ntg 64 -npl 1,16 2>&1 | grep -E "^\|" | tee -a "$OUT/llama_batched.txt"
fi
if [ "${SANITIZE:-1}" = 1 ]; then
echo "=== compute-sanitizer memcheck (270m, --quick)"
timeout ${SANITIZE_TIMEOUT:-200} compute-sanitizer --tool memcheck --leak-check no $RUN $G/bin/larql_gpu_check /tmp/270m.gguf --quick \
  > "$OUT/sanitizer.txt" 2>&1
echo "sanitizer rc $?"; grep -E "ERROR SUMMARY|PASS|FAIL" "$OUT/sanitizer.txt" | tail -8

fi
echo "=== done"
