#!/usr/bin/env bash
# Fuzz the GGUF and safetensors readers, the vindex metadata readers, the engine state-file readers, the LQL parser, larql serve's request path and the model readers (config.json, tokenizer.json, a GGUF loaded as a model) and the shard's gRPC requests with libFuzzer (+ASan/UBSan).
# Usage: scripts/fuzz.sh [BUILD_DIR=build-fuzz] [SECONDS=60]   (SECONDS per target)
# Configures BUILD_DIR with clang (RelWithDebInfo, LARQL_FUZZ=ON, LARQL_BUILD_TESTS=OFF) if it is
# not configured yet, builds the targets, seeds the git-ignored fuzz/corpus-work/ (the committed
# GGUF seeds; one valid state file per engine, written by state_fuzz itself; one seed per statement
# of docs/lql.md's ```lql blocks), and runs each for
# SECONDS, JOBS (default nproc) targets at a time. Exits non-zero on a crash, leak, timeout or out-of-memory; the reproducer is saved
# under fuzz/corpus-work/artifacts/.
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
cmake --build "$BUILD_DIR" --target gguf_fuzz safetensors_fuzz vindex_fuzz state_fuzz lql_fuzz serve_fuzz model_fuzz shard_fuzz -j "$JOBS"

WORK="$ROOT/fuzz/corpus-work"
mkdir -p "$WORK/gguf" "$WORK/safetensors" "$WORK/vindex" "$WORK/state" "$WORK/lql" "$WORK/serve" "$WORK/model" "$WORK/shard" "$WORK/artifacts"
cp -n "$ROOT"/fuzz/corpus/gguf/* "$WORK/gguf/" 2>/dev/null || true
cp -n "$ROOT"/fuzz/corpus/safetensors/* "$WORK/safetensors/" 2>/dev/null || true
cp -n "$ROOT"/fuzz/corpus/vindex/* "$WORK/vindex/" 2>/dev/null || true
cp -n "$ROOT"/fuzz/corpus/serve/* "$WORK/serve/" 2>/dev/null || true
"$BUILD_DIR/fuzz/state_fuzz" -write_seeds="$WORK/state" >/dev/null 2>&1  # one valid state per engine
# LQL seeds: each line of docs/lql.md's ```lql blocks that holds a statement, one file each.
awk -v dir="$WORK/lql" '/^```lql/{inb=1; next} /^```/{inb=0; next} inb && /[A-Za-z]/ {n++; print > (dir "/doc-" n ".lql"); close(dir "/doc-" n ".lql")}' "$ROOT/docs/lql.md"

# Model seeds (fuzz/model_fuzz.cc: the first byte picks the reader): the families' config.json and
# tokenizer.json fixtures, and the GGUF seeds.
for d in "$ROOT"/tests/model/data/families/*/; do
  n="$(basename "$d")"
  [[ -f "$WORK/model/config-$n" ]] || { printf '\x00'; cat "$d/config.json"; } > "$WORK/model/config-$n"
  [[ -f "$WORK/model/tokenizer-$n" ]] || { printf '\x01'; cat "$d/tokenizer.json"; } > "$WORK/model/tokenizer-$n"
done
for f in "$ROOT"/fuzz/corpus/gguf/* "$ROOT"/tests/model/data/families/{mixtral,qwen2_moe,phi3}/*-q8_0.gguf; do
  [[ -f "$WORK/model/gguf-$(basename "$f")" ]] || { printf '\x02'; cat "$f"; } > "$WORK/model/gguf-$(basename "$f")"
done

# run_target NAME CORPUS MAX_LEN [TIMEOUT=10] [EXTRA_FLAG]: run one target for SECONDS_TO_RUN;
# exit 1 on a finding (a crash, or one input running longer than TIMEOUT seconds).
run_target() {
  local name="$1" corpus="$2" max_len="$3" timeout="${4:-10}" extra="${5:--detect_leaks=1}" log="$WORK/$1.log" rc runs artifact
  echo "fuzz: running $name for ${SECONDS_TO_RUN}s (corpus $corpus, log $log)"
  set +e
  "$BUILD_DIR/fuzz/$name" "$corpus" \
    -max_total_time="$SECONDS_TO_RUN" -max_len="$max_len" -timeout="$timeout" -rss_limit_mb=2048 \
    -artifact_prefix="$WORK/artifacts/$name-" -print_final_stats=1 "$extra" >"$log" 2>&1
  rc=$?
  set -e
  runs="$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo '?')"
  if [[ $rc -ne 0 ]]; then
    tail -n 60 "$log"
    artifact="$(grep -Eo "Test unit written to [^ ]+" "$log" | tail -1 | sed 's/Test unit written to //' || true)"
    echo "fuzz: FAILED $name (exit $rc) after ${runs} runs; reproducer: ${artifact:-none}; log: $log"
    exit 1
  fi
  echo "fuzz: OK $name — ${runs} runs in ${SECONDS_TO_RUN}s, no crashes ($(ls "$corpus" | wc -l) corpus files)"
}

# The targets run JOBS at a time (each is one process on one core); a batch's summaries print in
# order once the batch ends, and any finding fails the run after its batch.
pids=() names=()
drain() {
  local i failed=0
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || failed=1
    cat "$WORK/${names[$i]}.summary"
  done
  pids=() names=()
  if ((failed)); then exit 1; fi
}
launch() {
  run_target "$@" >"$WORK/$1.summary" 2>&1 &
  pids+=($!) names+=("$1")
  if ((${#pids[@]} >= JOBS)); then drain; fi
}

launch gguf_fuzz "$WORK/gguf" 65536
launch safetensors_fuzz "$WORK/safetensors" 16384
launch vindex_fuzz "$WORK/vindex" 16384
launch state_fuzz "$WORK/state" 262144
launch lql_fuzz "$WORK/lql" 4096 1
launch serve_fuzz "$WORK/serve" 16384 10 -detect_leaks=0  # see fuzz/serve_fuzz.cc
launch model_fuzz "$WORK/model" 200000
launch shard_fuzz "$WORK/shard" 8192
drain
