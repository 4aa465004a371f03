# The README's two commands: `make demo` (set up, build, run the default model) and
# `make test` (set up, build, run every test CI runs). Both are idempotent.
BUILD ?= build
FUZZ_BUILD ?= build-fuzz
TSAN_BUILD ?= build-tsan
MODEL ?= models/gemma-3-270m-q4_k_m.gguf
PROMPT ?= Once upon a time, in a small village by the sea,
FUZZ_SECONDS ?= 30
JOBS ?= $(shell nproc)

.PHONY: all setup build demo test test-cpp test-web test-python test-python-package wheel fuzz tsan bench bench-kernels bench-edit-eval bench-edit-eval-1000 bench-edit-compile bench-shards llama-rpc clean cuda cuda-compile

all: build

setup:
	@scripts/setup.sh

# The Python extension (docs/python.md) is built in the same tree when the venv has nanobind
# (make setup installs it); decided when the recipe runs, after setup.
$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  $$(.venv/bin/python -c "import nanobind" 2>/dev/null && echo "-DLARQL_PYTHON=ON -DPython_EXECUTABLE=$(CURDIR)/.venv/bin/python")

build: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

demo: setup build
	./$(BUILD)/larql run $(MODEL) "$(PROMPT)" -n 64 --seed 42

test-cpp: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

test-python: build
	LARQL_BIN=$(CURDIR)/$(BUILD)/larql LARQL_BUILD_DIR=$(CURDIR)/$(BUILD) .venv/bin/python -m pytest tests/python -q --durations=25 \
	  --ignore=tests/python/test_python_api.py --ignore=tests/python/test_python_doc.py

# The Python package as a user gets it: a wheel (pip's own build through scikit-build-core, on the
# build tree above so nothing compiles twice), installed into a fresh venv, tested there.
WHEEL_DIR = $(BUILD)/wheel
PY_VENV = $(BUILD)/pyvenv
wheel: build
	rm -rf $(WHEEL_DIR)
	.venv/bin/pip wheel . -q --no-build-isolation --no-deps -w $(WHEEL_DIR) -Cbuild-dir=$(BUILD) \
	  -Ccmake.define.LARQL_BUILD_TESTS=ON -Ccmake.define.LARQL_CONSOLE=ON -Ccmake.define.Python_EXECUTABLE=$(CURDIR)/.venv/bin/python

test-python-package: wheel
	rm -rf $(PY_VENV)
	.venv/bin/python -m venv $(PY_VENV)
	$(PY_VENV)/bin/pip install -q $(WHEEL_DIR)/larql-*.whl "$$(grep -o '^pytest[^ ]*' requirements-dev.txt)"
	LARQL_BIN=$(CURDIR)/$(BUILD)/larql LARQL_BUILD_DIR=$(CURDIR)/$(BUILD) $(PY_VENV)/bin/python -X faulthandler -m pytest \
	  tests/python/test_python_api.py tests/python/test_python_doc.py -q --durations=10

fuzz:
	@scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# The web console's type-check and lint (its end-to-end test runs in test-python: test_console.py).
test-web:
	cd web && npm run --silent typecheck && npm run --silent lint && npm run --silent test

test: setup build test-cpp test-web fuzz test-python test-python-package cuda-compile

# The CUDA backend's device code compiled for sm_90 without a GPU (nvcc from the system, or
# NVIDIA's wheels into .cuda/: scripts/cuda_toolkit.sh); its CPU reference runs in test-cpp.
cuda-compile: setup
	scripts/cuda_compile_check.sh

# A CUDA build of everything (docs/backends.md): build-cuda/larql --device cuda.
CUDA_BUILD ?= build-cuda
cuda: setup
	@test -f $(CUDA_BUILD)/build.ninja || { T=$$(scripts/cuda_toolkit.sh) && cmake -S . -B $(CUDA_BUILD) -G Ninja \
	  -DCMAKE_BUILD_TYPE=Release -DLARQL_CUDA=ON -DCMAKE_CUDA_COMPILER=$$T/bin/nvcc -DCUDAToolkit_ROOT=$$T; }
	cmake --build $(CUDA_BUILD) -j $(JOBS) --target larql larql_gpu_check larql_synth_gemma3

# ThreadSanitizer over the threading tests (docs/architecture.md "Many sequences"): its own build
# directory, only the libraries and the two test binaries they need; a race fails the run.
TSAN_TESTS = ThreadPool.*:ManySequences.*:DecodeBatch.Cancel*
tsan:
	@test -f $(TSAN_BUILD)/build.ninja || cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DLARQL_TSAN=ON
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target util_tests inference_tests
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ./$(TSAN_BUILD)/tests/util_tests --gtest_filter='$(TSAN_TESTS)'
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ./$(TSAN_BUILD)/tests/inference_tests --gtest_filter='$(TSAN_TESTS)'

bench: setup build
	.venv/bin/python bench/side_by_side.py --larql ./$(BUILD)/larql --model $(MODEL)

# A model split over processes (docs/BENCHMARKS.md "Split over processes"): --ffn and --pipeline
# over 2 and 3 shards, the 2-shard splits in network namespaces with netem latency (root; left out
# where the kernel lacks netem), beside llama.cpp's RPC split when `make llama-rpc` has built it.
bench-shards: setup build
	.venv/bin/python bench/shard_bench.py --larql ./$(BUILD)/larql --model $(MODEL) $(BENCH_ARGS)

# llama.cpp's rpc-server and llama-bench (GGML_RPC=ON) from the venv's pinned llama.cpp, for
# bench-shards (opt-in: a second llama.cpp build, not part of setup).
llama-rpc: setup
	JOBS=$(JOBS) scripts/build_llama_rpc.sh $(BUILD)/llama-rpc

# Kernel microbenchmarks (Google Benchmark); BENCH_ARGS passes flags, e.g. --benchmark_filter=Gemm.
bench-kernels: setup $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target larql_kernel_bench
	./$(BUILD)/larql_kernel_bench $(BENCH_ARGS)

# Knowledge edits measured (docs/cli.md "edit-eval", docs/BENCHMARKS.md "Knowledge edits (edit-eval)"):
# the 100-fact subset, each fact alone and all accumulated in one patch, in INSERT's MODE
# EDIT_EVAL_MODE (subject, the mode that meets issue 31's single-edit targets; robust and compose,
# the default INSERT, for the baselines). The JSON document goes to $(BUILD)/edit-eval.json.
EDIT_EVAL_SET ?= data/edit_eval/subset100.jsonl
EDIT_EVAL_MODE ?= subject
EDIT_EVAL_ARGS ?= --every 10
$(BUILD)/edit-eval.vindex/index.json:
	./$(BUILD)/larql extract $(MODEL) -o $(BUILD)/edit-eval.vindex --level inference
bench-edit-eval: setup build $(BUILD)/edit-eval.vindex/index.json
	./$(BUILD)/larql edit-eval $(BUILD)/edit-eval.vindex --set $(EDIT_EVAL_SET) --mode $(EDIT_EVAL_MODE) $(EDIT_EVAL_ARGS) \
	  --json-out $(BUILD)/edit-eval.json

# Issue 31's benchmark: the 1,000 facts of data/edit_eval/full.jsonl INSERTed one after another
# into one patch, every earlier fact re-tested every 100 edits (the curve, printed as it goes),
# held-out perplexity and REMOVE PATCH's bit-identical logits at the end. $(BUILD)/edit-eval-1000.json.
bench-edit-eval-1000: setup build $(BUILD)/edit-eval.vindex/index.json
	./$(BUILD)/larql edit-eval $(BUILD)/edit-eval.vindex --set data/edit_eval/full.jsonl --mode $(EDIT_EVAL_MODE) \
	  --single 0 --every 100 --json-out $(BUILD)/edit-eval-1000.json

# Issue 31's "the compiled GGUF in llama.cpp answers >= 90% of them": the subset's facts INSERTed
# (MODE $(EDIT_EVAL_MODE)) into one patch, COMPILE CURRENT INTO MODEL, llama.cpp answering the
# canonical, paraphrase and neighbourhood prompts from that GGUF (bench/edit_compile_llama.py).
# The 1,000: make bench-edit-compile EDIT_EVAL_SET=data/edit_eval/full.jsonl EDIT_COMPILE_FACTS=1000.
EDIT_COMPILE_FACTS ?= 100
bench-edit-compile: setup build $(BUILD)/edit-eval.vindex/index.json
	.venv/bin/python bench/edit_compile_llama.py $(BUILD)/edit-eval.vindex --set $(EDIT_EVAL_SET) --facts $(EDIT_COMPILE_FACTS) \
	  --mode $(EDIT_EVAL_MODE) --json-out $(BUILD)/edit-compile-llama.json

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD) $(TSAN_BUILD)
