#!/usr/bin/env bash
# Fuzz the GGUF reader with libFuzzer (+ASan/UBSan).
# Usage: scripts/fuzz.sh [BUILD_DIR=build-fuzz] [SECONDS=60]
# Configures BUILD_DIR with clang (RelWithDebInfo, LARQL_FUZZ=ON, LARQL_BUILD_TESTS=OFF) if it is
# not configured yet, builds only gguf_fuzz, copies the committed seeds (fuzz/corpus/gguf) into the
# git-ignored fuzz/corpus-work/gguf, and runs for SECONDS. Exits non-zero on a crash, leak, timeout
# or out-of-memory; the reproducer is saved under fuzz/corpus-work/artifacts/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${1:-build-fuzz}"
SECONDS_TO_RUN="${2:-60}"
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$ROOT/$BUILD_DIR" ;; esac
JOBS="${JOBS:-$(nproc)}"

CXX_BIN="$(command -v clang++ || command -v clang++-14 || true)"
if [[ -z "$CXX_BIN" ]]; then
  echo "fuzz: FAILED — clang++ not found (install clang and libclang-rt-dev)" >&2
  exit 2
fi

if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER="$CXX_BIN" \
    -DLARQL_FUZZ=ON -DLARQL_BUILD_TESTS=OFF
fi
cmake --build "$BUILD_DIR" --target gguf_fuzz -j "$JOBS"

WORK="$ROOT/fuzz/corpus-work"
mkdir -p "$WORK/gguf" "$WORK/artifacts"
cp -n "$ROOT"/fuzz/corpus/gguf/* "$WORK/gguf/" 2>/dev/null || true
LOG="$WORK/gguf_fuzz.log"

echo "fuzz: running gguf_fuzz for ${SECONDS_TO_RUN}s (corpus $WORK/gguf, log $LOG)"
set +e
"$BUILD_DIR/fuzz/gguf_fuzz" "$WORK/gguf" \
  -max_total_time="$SECONDS_TO_RUN" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$WORK/artifacts/" -print_final_stats=1 >"$LOG" 2>&1
rc=$?
set -e

runs="$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$LOG" | grep -Eo '[0-9]+$' || echo '?')"
if [[ $rc -ne 0 ]]; then
  tail -n 60 "$LOG"
  artifact="$(grep -Eo "Test unit written to [^ ]+" "$LOG" | tail -1 | sed 's/Test unit written to //' || true)"
  echo "fuzz: FAILED gguf_fuzz (exit $rc) after ${runs} runs; reproducer: ${artifact:-none}; log: $LOG"
  exit 1
fi
echo "fuzz: OK gguf_fuzz — ${runs} runs in ${SECONDS_TO_RUN}s, no crashes ($(ls "$WORK/gguf" | wc -l) corpus files)"
