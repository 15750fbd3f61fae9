# Loom: `make demo` and `make test` work on a fresh Debian 12 machine that has
# only a compiler and make; `deps` installs whatever else is missing.

BUILD_DIR     ?= build
FUZZ_DIR      ?= build-fuzz
BUILD_TYPE    ?= RelWithDebInfo
JOBS          ?= $(shell nproc 2>/dev/null || echo 2)
FUZZ_SECONDS  ?= 60
CORPUS_DIR    ?= ../shared/corpus/hlo
FORMAT_DIRS   := src tools tests bench fuzz

.PHONY: all deps configure build test check demo bench bench-cost bench-exec bench-ring bench-sim bench-presets bench-published bench-overlap calibrate fuzz format clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

configure: $(BUILD_DIR)/build.ninja

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: deps
	@$(MAKE) --no-print-directory build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j2

# The fast tier (ctest label `fast`): everything but the few slowest tests.
check: deps
	@$(MAKE) --no-print-directory build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j2 -L fast

DEMO_DIR      := $(BUILD_DIR)/demo

# The demo block: its statistics, the collective-matmul rewrite with every
# decision explained, traffic and memory after it, the rewritten block run
# against the original on 4 in-process devices (bitwise with the
# deterministic kernels, within rounding with OpenBLAS), the cost model's decisions
# on two targets, and the simulated step before and after on both.
demo: deps
	@$(MAKE) --no-print-directory build
	@mkdir -p $(DEMO_DIR)
	./$(BUILD_DIR)/loom stats examples/mlp_block_tp4.hlo
	@echo
	./$(BUILD_DIR)/loom opt examples/mlp_block_tp4.hlo --passes=collective-matmul --explain -o $(DEMO_DIR)/mlp_block_tp4.ring.hlo
	@echo
	./$(BUILD_DIR)/loom stats $(DEMO_DIR)/mlp_block_tp4.ring.hlo | sed -n '/^per device, dynamic/,$$p'
	@echo
	@echo "# The rewrite is exact: bitwise equal with the deterministic dot kernels, on any CPU ..."
	./$(BUILD_DIR)/loom compare examples/mlp_block_tp4.hlo $(DEMO_DIR)/mlp_block_tp4.ring.hlo --devices 4 --deterministic
	@echo
	@echo "# ... and with OpenBLAS, whose kernels (chosen by CPU and size) may round a block differently"
	./$(BUILD_DIR)/loom compare examples/mlp_block_tp4.hlo $(DEMO_DIR)/mlp_block_tp4.ring.hlo --devices 4 --tolerance rounding
	@echo
	@echo "# The cost model's gate on real targets: the demo block, and the same block at a large model's size"
	@for target in tpu-v4-4x4x4 dgx-h100; do for block in mlp_block_tp4 mlp_block_tp8_large; do \
	  ./$(BUILD_DIR)/loom opt examples/$$block.hlo --passes=collective-matmul --target $$target --explain -o $(DEMO_DIR)/$$block.$$target.hlo || exit 1; \
	done; done
	@echo
	@echo "# The simulator: before and after the rewrite (ring, asynchronous transfers, list schedule)"
	@for target in tpu-v4-4x4x4 dgx-h100-x4; do \
	  ./$(BUILD_DIR)/loom opt $(DEMO_DIR)/mlp_block_tp4.ring.hlo --target $$target --passes=async-collectives,schedule -o $(DEMO_DIR)/mlp_block_tp4.ring.$$target.hlo || exit 1; \
	  echo; ./$(BUILD_DIR)/loom simulate --compare examples/mlp_block_tp4.hlo $(DEMO_DIR)/mlp_block_tp4.ring.$$target.hlo --target $$target --trace $(DEMO_DIR)/mlp_block_tp4.$$target.trace.json || exit 1; \
	  ./$(BUILD_DIR)/loom opt examples/mlp_block_tp8_large.hlo --target $$target --passes=collective-matmul,async-collectives,schedule -o $(DEMO_DIR)/mlp_block_tp8_large.$$target.hlo || exit 1; \
	  echo; ./$(BUILD_DIR)/loom simulate --compare examples/mlp_block_tp8_large.hlo $(DEMO_DIR)/mlp_block_tp8_large.$$target.hlo --target $$target --trace $(DEMO_DIR)/mlp_block_tp8_large.$$target.trace.json || exit 1; \
	done
	@echo
	@echo "Timelines of the rewritten blocks (open in https://ui.perfetto.dev): $(DEMO_DIR)/*.trace.json"

bench: build
	./$(BUILD_DIR)/loom_bench

# The cost model's estimates of the demo block on every target, as ratios.
bench-cost: build
	./$(BUILD_DIR)/loom_cost_bench

# The executor's kernels, each beside a native reference, as ratios.
bench-exec: build
	./$(BUILD_DIR)/loom_exec_bench

# The simulator at scale: the demo block on TPU v4 slices of 64 to 2048 chips.
bench-sim: build
	./$(BUILD_DIR)/loom_sim_bench

# Every model preset at full size under its plan: built, verified, its memory, its step simulated.
bench-presets: build
	bench/presets/run.sh $(BUILD_DIR)/loom

# Loom's simulated steps against published measurements of real training runs.
bench-published: build
	bench/published/run.sh $(BUILD_DIR)/loom

# Real overlap under a bandwidth-shaped loopback link (needs root).
bench-overlap: build
	bench/overlap/run.sh $(BUILD_DIR)/loom

# Loom's rings against a hand-written MPI ring under the shaped link (needs root).
bench-ring: build
	bench/ring/run.sh $(BUILD_DIR)

# The simulator's predictions against the executor under the shaped link (needs root).
calibrate: build
	bench/calibration/run.sh $(BUILD_DIR)/loom

# The libFuzzer targets under ASan and UBSan, FUZZ_SECONDS each:
# parse_verify_fuzzer (parser, verifier, printer) and pipeline_fuzzer
# (every pass, stats, the simulator, the executor on tiny shapes; see
# fuzz/). Seeds: the examples, the malformed and limit test modules and
# (when present) the shared corpus. Everything they write stays under
# $(FUZZ_DIR); it exits non-zero on any finding (crash, leak, timeout, out
# of memory, a broken property), the input under $(FUZZ_DIR)/artifacts.
FUZZERS := parse_verify_fuzzer pipeline_fuzzer
fuzz: deps
	CXX=clang++ cmake -S . -B $(FUZZ_DIR) -G Ninja -DLOOM_FUZZ=ON -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)
	cmake --build $(FUZZ_DIR) -j $(JOBS) --target $(FUZZERS)
	rm -rf $(FUZZ_DIR)/seeds $(FUZZ_DIR)/artifacts
	mkdir -p $(FUZZ_DIR)/seeds $(FUZZ_DIR)/artifacts
	# Seeds: every small module (not tests/lit/*/large/: 64-device modules whose
	# gate trials take seconds under the sanitizers, too near the 20 s timeout).
	cp examples/*.hlo examples/*/*.hlo tests/ir/bad/*.hlo tests/exec/modules/*.hlo tests/lit/*/*.hlo \
	  tests/cli/limits/*.hlo $(FUZZ_DIR)/seeds/
	if [ -d $(CORPUS_DIR) ]; then cp $(CORPUS_DIR)/*.hlo $(FUZZ_DIR)/seeds/; fi
	for fuzzer in $(FUZZERS); do \
	  rm -rf $(FUZZ_DIR)/work-$$fuzzer && mkdir -p $(FUZZ_DIR)/work-$$fuzzer && \
	  ./$(FUZZ_DIR)/$$fuzzer $(FUZZ_DIR)/work-$$fuzzer $(FUZZ_DIR)/seeds \
	    -max_total_time=$(FUZZ_SECONDS) -timeout=20 -rss_limit_mb=3072 -max_len=65536 \
	    -artifact_prefix=$(FUZZ_DIR)/artifacts/$$fuzzer- -print_final_stats=1 || exit 1; \
	done

format:
	find $(FORMAT_DIRS) -type f \( -name '*.cc' -o -name '*.h' \) -print0 2>/dev/null \
	  | xargs -0 -r clang-format -i

clean:
	rm -rf $(BUILD_DIR) $(FUZZ_DIR)
