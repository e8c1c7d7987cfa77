# moezip build. `make` builds everything, `make test` runs the test suite,
# `make run` builds what the main job needs and runs it on the bundled real model, `make bench` measures, `make fuzz` fuzzes
# (docs/internals/fuzzing.md).
# Every target first runs `make deps` (tools/install-deps.sh), which installs only what is missing.

# The engine moezip is built for: a node-llama-cpp install (a folder holding node_modules/) or a
# llama.cpp CMake build folder. Default: the pinned node-llama-cpp 3.21.1 that `make deps` installs.
# `make deps` (tools/engines/engine-config.sh) resolves it into $(BUILD)/engine.mk (ENGINE_NAME,
# ENGINE_BIN, ENGINE_SRC, ENGINE_LINK) and the identity compiled in, $(BUILD)/gen/engine_pin.inc.
# One build folder per engine: make ENGINE=~/llama.cpp/build BUILD=build-mine (docs/engines.md).
PINNED_ENGINE := $(CURDIR)/.deps/engine
ENGINE     ?= $(PINNED_ENGINE)
BUILD      ?= build
# the shared fixtures folder: SHARED=... on the command line, else an exported MOEZIP_SHARED, else ../shared
SHARED     ?= $(if $(MOEZIP_SHARED),$(MOEZIP_SHARED),$(abspath ../shared))
# Engines `make test` builds moezip for besides $(ENGINE) (tools/engines/prepare.sh; docs/engines.md).
# `make test TEST_ENGINES=` skips them (their tests then report as skipped).
TEST_ENGINES ?= llama.cpp:pinned npm:3.22.1 npm:3.20.0
ifeq ($(abspath $(ENGINE)),$(PINNED_ENGINE))
ENGINE_SRC_ARG := $(CURDIR)/.deps/llama.cpp
DEPS_FLAGS :=
else
DEPS_FLAGS := --no-engine
endif
-include $(BUILD)/engine.mk

CXX      ?= g++
CC       ?= gcc
SANITIZE ?=
OPT      ?= -O2
CXXFLAGS := -std=c++17 $(OPT) -g -Wall -Wextra -Werror -fPIC -fvisibility=hidden -MMD -MP
# The engine's headers (public and the internal ggml-impl.h), from its own source tree; the pin
# (engine_pin.inc) from the build folder.
CPPFLAGS := -I$(CURDIR) -I$(BUILD)/gen -isystem $(ENGINE_SRC)/include -isystem $(ENGINE_SRC)/ggml/include \
            -isystem $(ENGINE_SRC)/ggml/src
LDFLAGS  :=
ifneq ($(SANITIZE),)
CXXFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer
LDFLAGS  += -fsanitize=$(SANITIZE)
endif

# Our own programs link the engine directly; libmoezip.so and moezip-worker never do (they bind
# it at run time: the host's libraries, or the worker's --engine).
ENGINE_LIBS := $(ENGINE_LINK)
SYS_LIBS    := -lzmq -lxxhash -ldl -lpthread

# Core: everything tests, tools and the preload share. preload/hooks.cpp (the extern "C" shims)
# is the only file that goes into libmoezip.so alone.
PRELOAD_SHIMS := preload/hooks.cpp
CORE_SRC := $(sort $(wildcard coordinator/*/*.cpp provider_map/*.cpp) \
                   $(filter-out $(PRELOAD_SHIMS),$(wildcard preload/*.cpp)))
CORE_OBJ := $(CORE_SRC:%.cpp=$(BUILD)/obj/%.o)
CORE_LIB := $(BUILD)/libmoezip_core.a

PRELOAD_LIB := $(BUILD)/libmoezip.so

TOOL_DIRS := $(patsubst %/,%,$(dir $(wildcard tools/moezip-*/*.cpp)))
TOOLS     := $(sort $(patsubst tools/%,$(BUILD)/bin/%,$(TOOL_DIRS)))

# tests/<job>/*.cpp (tests/README.md); tests/hosts/ and tests/fuzz/ are separate programs
TEST_SRC := $(wildcard tests/*/*.cpp)
TEST_SRC := $(filter-out tests/hosts/% tests/fuzz/%,$(TEST_SRC))
TEST_OBJ := $(TEST_SRC:%.cpp=$(BUILD)/obj/%.o)
TEST_BIN := $(BUILD)/bin/moezip-tests
# tests/hosts/: small llama.h hosts for scenarios moezip-run does not express (model swap, warmup,
# parallel contexts, signals, exit mid-decode); they reuse moezip-run's engine and generation code.
TEST_HOST := $(BUILD)/bin/moezip-test-host
DEEPBIND_HOST := $(BUILD)/bin/moezip-deepbind-host
TEST_HOST_OBJ := $(patsubst %.cpp,$(BUILD)/obj/%.o,$(wildcard tests/hosts/*.cpp) \
                   $(filter-out tools/moezip-run/main.cpp,$(wildcard tools/moezip-run/*.cpp)))

# Fuzz targets (tests/fuzz/, docs/internals/fuzzing.md): libFuzzer with ASan and UBSan (every UBSan report,
# __builtin_unreachable included, stops the run), clang from Debian (make deps installs it). Each
# target links only the sources it fuzzes, built again with coverage instrumentation.
FUZZ_CXX     ?= clang++-14
FUZZ_FLAGS   := -std=c++17 -O1 -g -fno-omit-frame-pointer -Wall -Wextra -Werror \
                -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ         := $(BUILD)/fuzz
FUZZ_TARGETS := config request reply
FUZZ_BINS    := $(FUZZ_TARGETS:%=$(FUZZ)/%_fuzz) $(FUZZ)/selftest_fuzz   # selftest: tests/wire/fuzz_test.cpp only
FUZZ_SRC_config  := tests/fuzz/config_fuzz.cpp $(sort $(wildcard coordinator/config/*.cpp)) provider_map/status.cpp \
                    coordinator/base/log.cpp coordinator/base/log_limit.cpp
FUZZ_SRC_request := tests/fuzz/request_fuzz.cpp tools/moezip-worker/request/request_check.cpp coordinator/wire/protocol.cpp \
                    coordinator/config/expert_range.cpp provider_map/status.cpp \
                    tools/moezip-worker/request/worker_plan.cpp tools/moezip-worker/request/worker_budget.cpp coordinator/modes/split.cpp
FUZZ_SRC_reply   := tests/fuzz/reply_fuzz.cpp coordinator/wire/protocol.cpp provider_map/status.cpp
FUZZ_SRC_selftest := tests/fuzz/selftest_fuzz.cpp
FUZZ_SECONDS ?= 300

.PHONY: all deps test run bench bench-smoke clean fixtures fuzz fuzz-build fuzz-seeds engines engine-tools
NPROC := $(shell nproc 2>/dev/null || echo 2)
all: deps
	@$(MAKE) --no-print-directory -j$(NPROC) build-all

.PHONY: build-all build-engine-tools
build-all: $(PRELOAD_LIB) $(TOOLS) $(TEST_BIN) $(TEST_HOST) $(DEEPBIND_HOST) $(FUZZ_BINS)

deps:
	@tools/install-deps.sh $(DEPS_FLAGS)
	@tools/engines/engine-config.sh "$(ENGINE)" "$(BUILD)" $(ENGINE_SRC_ARG)

# What a host and its workers need, for one engine, without the test suite (tools/engines/prepare.sh
# builds it per test engine; the README's two-machine quick start, docs/deploy.md).
engine-tools: deps
	@$(MAKE) --no-print-directory -j$(NPROC) build-engine-tools
build-engine-tools: $(PRELOAD_LIB) $(BUILD)/bin/moezip-run $(BUILD)/bin/moezip-worker $(BUILD)/bin/moezip-report \
                    $(BUILD)/bin/moezip-slice

# Installs or builds every engine of TEST_ENGINES (cached: docs/engines.md) and moezip for each in
# build-engines/<name>/; writes $(BUILD)/engines.json for the tests.
engines: deps
	+@SANITIZE=$(SANITIZE) tools/engines/prepare.sh "$(BUILD)" $(TEST_ENGINES)

$(BUILD)/obj/%.o: %.cpp $(BUILD)/engine.mk
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

$(CORE_LIB): $(CORE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(PRELOAD_LIB): $(PRELOAD_SHIMS:%.cpp=$(BUILD)/obj/%.o) $(CORE_LIB) preload/exports.map
	$(CXX) -shared $(LDFLAGS) -o $@ $(filter %.o,$^) $(CORE_LIB) \
	  -Wl,--version-script=preload/exports.map -Wl,--no-undefined -static-libstdc++ -static-libgcc $(SYS_LIBS)

# objects of tools/<name>/*.cpp and of its subfolders, one level (a function, so that its % is not
# taken for the rule's stem)
tool_objs = $(patsubst %.cpp,$(BUILD)/obj/%.o,$(wildcard tools/$(1)/*.cpp tools/$(1)/*/*.cpp))
# keep tool objects: make would otherwise delete them as intermediates and recompile every time
.SECONDARY:
.SECONDEXPANSION:
$(BUILD)/bin/%: $$(call tool_objs,$$*) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CORE_LIB) $(ENGINE_LIBS) $(SYS_LIBS)

# The model tools' shared code (tools/model-common/: the tensor types they write), linked into the
# tools that write GGUF files only: it calls the engine's ggml, which the worker does not link.
MODEL_COMMON_OBJ := $(patsubst %.cpp,$(BUILD)/obj/%.o,$(wildcard tools/model-common/*.cpp))
$(BUILD)/bin/moezip-fixture $(BUILD)/bin/moezip-upcycle: $(MODEL_COMMON_OBJ)
# moezip-slice reads models with the worker's reader of GGUF files and split parts, and writes its keys.
$(BUILD)/bin/moezip-slice: $(addprefix $(BUILD)/obj/tools/moezip-worker/model/,gguf_parts.o slice_keys.o)

# The worker loads the host's ggml at run time (tools/moezip-worker/worker_engine.h): no engine link.
$(BUILD)/bin/moezip-worker: $$(call tool_objs,moezip-worker) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CORE_LIB) $(SYS_LIBS)

$(TEST_HOST): $(TEST_HOST_OBJ) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) -o $@ $(TEST_HOST_OBJ) $(CORE_LIB) $(ENGINE_LIBS) $(SYS_LIBS)

# not linked against the engine: it dlopens it with RTLD_DEEPBIND (tests/hosts/deepbind_host.c)
$(DEEPBIND_HOST): tests/hosts/deepbind_host.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -std=c11 $(OPT) -g -Wall -Wextra -Werror $(filter -fsanitize=%,$(CXXFLAGS)) $(LDFLAGS) -o $@ $< -ldl

# tools' code tested in-process: the worker's budget estimate against the executor and its plan
# table; moezip-ceiling's simulated step against a recording link; moezip-fixture's direct q4_K/q8_0
# blocks against the engine's dequantization
TEST_WORKER_OBJ := $(addprefix $(BUILD)/obj/tools/moezip-worker/request/,worker_budget.o worker_plan.o request_check.o) \
                   $(addprefix $(BUILD)/obj/tools/moezip-worker/model/,load_jobs.o load_progress.o) \
                   $(BUILD)/obj/tools/moezip-ceiling/decode_sim.o $(BUILD)/obj/tools/moezip-fixture/fixture_fast_quant.o
$(TEST_BIN): $(TEST_OBJ) $(TEST_WORKER_OBJ) $(CORE_LIB)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) -o $@ $(TEST_OBJ) $(TEST_WORKER_OBJ) $(CORE_LIB) $(ENGINE_LIBS) $(SYS_LIBS) -lgtest -lgtest_main

# objects of one fuzz target's sources (a function, for the same reason as tool_objs)
fuzz_objs = $(patsubst %.cpp,$(FUZZ)/obj/%.o,$(FUZZ_SRC_$(1)))
$(FUZZ)/obj/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(CPPFLAGS) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ)/%_fuzz: $$(call fuzz_objs,$$*)
	$(FUZZ_CXX) -fsanitize=fuzzer,address,undefined -o $@ $^ -lxxhash

fuzz-build: $(FUZZ_BINS)

# every target for FUZZ_SECONDS (default 300) on a corpus kept in build/fuzz/corpus/
fuzz: all
	@BUILD=$(BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) tools/run-fuzz.sh $(FUZZ_TARGETS)

# rewrites the request and reply seeds (real protocol messages) in tests/fuzz/corpus/
fuzz-seeds: $(FUZZ)/fuzz_seeds
	$(FUZZ)/fuzz_seeds tests/fuzz/corpus

$(FUZZ)/fuzz_seeds: tests/fuzz/fuzz_seeds.cpp coordinator/wire/protocol.cpp provider_map/status.cpp tests/fuzz/fuzz_message.h
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) -std=c++17 -O1 -Wall -Wextra -Werror -o $@ $(filter %.cpp,$^) -lxxhash

test: all
	+@$(MAKE) --no-print-directory engines
	@MOEZIP_SHARED=$(SHARED) BUILD=$(BUILD) SANITIZE=$(SANITIZE) CXX=$(CXX) tools/run-tests.sh

# make run builds only what tools/run-demo.sh runs: the preload, the worker, and the tools it calls
# (moezip-upcycle makes the MoE model, moezip-report compares the two runs); no test or fuzz target.
RUN_DEPS := $(PRELOAD_LIB) $(BUILD)/bin/moezip-upcycle $(BUILD)/bin/moezip-worker $(BUILD)/bin/moezip-report
.PHONY: build-run
build-run: $(RUN_DEPS)

run: deps
	@$(MAKE) --no-print-directory -j$(NPROC) build-run
	@MOEZIP_SHARED=$(SHARED) tools/run-demo.sh

bench: all
	@MOEZIP_SHARED=$(SHARED) tools/run-bench.sh

# the bench harness end to end in a few minutes: the small real model, one repetition, loopback,
# every kind of variant (moezip's, the references and llama.cpp's RPC); numbers too few to quote
bench-smoke: all
	@MOEZIP_SHARED=$(SHARED) BENCH_MODELS=stories-moe8 BENCH_REPS=1 BENCH_NETS=none \
	    BENCH_VARIANTS="single single_nr experts1 shard1 rpc_single rpc_experts rpc_tensor" tools/run-bench.sh

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj $(FUZZ)/obj -name '*.d' 2>/dev/null)
