# The README's two commands: `make demo` (set up, build, run the default model) and
# `make test` (set up, build, run every test CI runs). Both are idempotent.
BUILD ?= build
FUZZ_BUILD ?= build-fuzz
MODEL ?= models/gemma-3-270m-q4_k_m.gguf
PROMPT ?= Once upon a time, in a small village by the sea,
FUZZ_SECONDS ?= 60
JOBS ?= $(shell nproc)

.PHONY: all setup build demo test test-cpp test-python fuzz bench bench-kernels clean

all: build

setup:
	@scripts/setup.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

build: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

demo: setup build
	./$(BUILD)/larql run $(MODEL) "$(PROMPT)" -n 64 --seed 42

test-cpp: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

test-python: build
	LARQL_BIN=$(CURDIR)/$(BUILD)/larql LARQL_BUILD_DIR=$(CURDIR)/$(BUILD) .venv/bin/python -m pytest tests/python -q

fuzz:
	@scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

test: setup build test-cpp fuzz test-python

bench: setup build
	.venv/bin/python bench/side_by_side.py --larql ./$(BUILD)/larql --model $(MODEL)

# Kernel microbenchmarks (Google Benchmark); BENCH_ARGS passes flags, e.g. --benchmark_filter=Gemm.
bench-kernels: setup $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target larql_kernel_bench
	./$(BUILD)/larql_kernel_bench $(BENCH_ARGS)

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD)
