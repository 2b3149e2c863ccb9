# glm.c build. `make` builds ./glm for this CPU; `make ARCH=x86-64-v3` builds a portable binary
# (the integer kernels still pick AVX2, AVX-VNNI or AVX-512 VNNI at run time from what the CPU
# supports).
CC      ?= gcc
ARCH    ?= native
# -ffp-contract=off: no silent FMA contraction, so float results match the scalar reference and the
# oracle's separately rounded operations (docs/model.md §7.8).
CFLAGS  ?= -O3 -march=$(ARCH) -fopenmp -std=gnu11 -Wall -Wextra -ffp-contract=off
LDLIBS  = -lm
HEADERS = $(wildcard *.h)
# The engine (glm.c) and its front ends: main.c includes them all, one translation unit.
FRONT_ENDS = main.c cli.c validate.c text.c quality.c server.c api_anthropic.c \
             api_responses.c api_ollama.c web.c plan.c
# The browser page (web/): its files are embedded into the binary as web_assets.h, generated here.
WEB_FILES = web/index.html web/style.css web/app.js
SOURCES = glm.c $(FRONT_ENDS) $(filter-out web_assets.h,$(HEADERS)) web_assets.h
# --version names the commit it was built from
GLM_COMMIT := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
# ./glm --version names the commit: a stamp file that changes with it makes a new commit rebuild glm
COMMIT_STAMP := $(shell c='$(GLM_COMMIT)'; [ "$$(cat .glm_commit 2>/dev/null)" = "$$c" ] || echo "$$c" > .glm_commit; echo .glm_commit)

# every tests/test_NAME.c is a unit-test binary tests/bin/test_NAME
TEST_BINS = $(patsubst tests/%.c,tests/bin/%,$(wildcard tests/test_*.c))
# Programs the test scripts drive (built like the tests, so `make asan` covers them too).
TOOL_BINS = tests/bin/tokdrive tests/bin/cpu_kernels tools/iobench tests/bin/http_echo
# Fuzz targets: every tests/fuzz/fuzz_NAME.c is one (a new file is picked up by itself). Each is built
# twice: with gcc and a small replay main as tests/bin/fuzz_replay_NAME (`make test` replays every seed
# and kept crash through it, no libFuzzer needed), and with clang's libFuzzer + ASan + UBSan as
# tests/bin/fuzz_NAME (`make fuzz`; `make test` runs each ~15 s when clang is installed).
FUZZ_NAMES   = $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_REPLAYS = $(patsubst %,tests/bin/fuzz_replay_%,$(FUZZ_NAMES))
FUZZ_BINS    = $(patsubst %,tests/bin/fuzz_%,$(FUZZ_NAMES))
CLANG       ?= clang
FUZZ_CFLAGS  = -g $(FUZZ_OPT) -march=$(ARCH) -std=gnu11 -pthread -fno-omit-frame-pointer \
               -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FUZZ_SECONDS ?= 60
HAVE_CLANG  := $(shell command -v $(CLANG) 2>/dev/null)
# -O1, except for the targets that include glm.c: clang 14's UBSan instrumentation at -O1 takes over
# ten minutes of CPU on glm.c (4 s at -O0), which alone would blow CI's budget.
FUZZ_OPT    ?= -O1
$(patsubst tests/fuzz/%.c,tests/bin/%,$(shell grep -lE '^\#include "(\.\./)*(glm|main)\.c"' tests/fuzz/fuzz_*.c)): FUZZ_OPT = -O0

# aarch64 by cross-compilation (Debian: gcc-aarch64-linux-gnu; tests run under qemu-user):
# `make glm-aarch64` builds ./glm-aarch64 for any ARMv8-A (the NEON kernels pick dotprod or i8mm at
# run time), `make test-aarch64` runs tests/t_aarch64.sh (kernel tests under emulated CPUs with and
# without the extensions, the oracle fixtures, integer logits equal to the x86 build's).
AARCH64_CC     ?= aarch64-linux-gnu-gcc
AARCH64_CFLAGS ?= -O3 -march=armv8-a -fopenmp -std=gnu11 -Wall -Wextra -ffp-contract=off
HAVE_AARCH64   := $(shell command -v $(AARCH64_CC) 2>/dev/null)
AARCH64_BINS    = glm-aarch64 tests/bin/aarch64/test_quant tests/bin/aarch64/cpu_kernels

# An AVX2-only x86 CPU by emulation (qemu-x86_64 offers AVX2 and no AVX-512 or AVX-VNNI): the
# portable build (ARCH=x86-64-v3) of glm and of the kernel and generator tests, run by
# tests/t_avx2.sh (`make test-avx2`) under qemu-x86_64 on any x86-64 host.
X86_V3_CFLAGS ?= -O3 -march=x86-64-v3 -fopenmp -std=gnu11 -Wall -Wextra -ffp-contract=off
HAVE_QEMU_X86 := $(shell command -v qemu-x86_64 2>/dev/null)
X86_V3_BINS    = glm-x86-64-v3 tests/bin/x86-64-v3/test_quant tests/bin/x86-64-v3/cpu_kernels \
                 tests/bin/x86-64-v3/test_generator

.PHONY: all demo test test-bins test-aarch64 test-avx2 asan bench clean clean-bins fuzz fuzz-bins
all: glm

glm: $(SOURCES) $(COMMIT_STAMP)
	$(CC) $(CFLAGS) -DGLM_COMMIT='"$(GLM_COMMIT)"' -o $@ main.c $(LDLIBS)

web_assets.h: $(WEB_FILES) tools/embed_web.sh
	sh tools/embed_web.sh $(WEB_FILES) > $@.tmp && mv $@.tmp $@

glm-aarch64: $(SOURCES) $(COMMIT_STAMP)
	$(AARCH64_CC) $(AARCH64_CFLAGS) -DGLM_COMMIT='"$(GLM_COMMIT)"' -o $@ main.c $(LDLIBS)

tests/bin/aarch64/%: tests/%.c $(HEADERS) $(wildcard tests/*.h)
	@mkdir -p tests/bin/aarch64
	$(AARCH64_CC) $(AARCH64_CFLAGS) -I. -o $@ $< $(LDLIBS)

test-aarch64: glm $(AARCH64_BINS)
	bash tests/t_aarch64.sh

glm-x86-64-v3: $(SOURCES) $(COMMIT_STAMP)
	$(CC) $(X86_V3_CFLAGS) -DGLM_COMMIT='"$(GLM_COMMIT)"' -o $@ main.c $(LDLIBS)

tests/bin/x86-64-v3/%: tests/%.c $(HEADERS) $(wildcard tests/*.h)
	@mkdir -p tests/bin/x86-64-v3
	$(CC) $(X86_V3_CFLAGS) -I. -o $@ $< $(LDLIBS)

test-avx2: glm $(X86_V3_BINS)
	bash tests/t_avx2.sh

tests/bin/%: tests/%.c $(HEADERS) $(wildcard tests/*.h)
	@mkdir -p tests/bin
	$(CC) $(CFLAGS) -I. -o $@ $< $(LDLIBS)

tools/iobench: tools/iobench.c
	$(CC) $(CFLAGS) -pthread -o $@ $< $(LDLIBS)

tests/bin/fuzz_replay_%: tests/fuzz/fuzz_%.c tests/fuzz/replay.c $(wildcard tests/fuzz/fuzz_*.c) $(SOURCES)
	@mkdir -p tests/bin
	$(CC) $(CFLAGS) -I. -o $@ $< tests/fuzz/replay.c $(LDLIBS)

tests/bin/fuzz_%: tests/fuzz/fuzz_%.c $(wildcard tests/fuzz/fuzz_*.c) $(SOURCES)
	@mkdir -p tests/bin
	$(CLANG) $(FUZZ_CFLAGS) -I. -o $@ $< $(LDLIBS)

fuzz-bins: $(FUZZ_BINS)

# Each target for FUZZ_SECONDS, one after the other on one core; a crash is kept in
# tests/fuzz/regressions/NAME/ (commit it with the fix: `make test` replays it from then on).
fuzz: $(FUZZ_BINS)
	FUZZ_SECONDS=$(FUZZ_SECONDS) bash tests/fuzz/run.sh $(FUZZ_NAMES)

# tests that include the engine (glm.c) or a front end
ENGINE_TESTS = tests/bin/test_attention tests/bin/test_generator tests/bin/test_loader \
               tests/bin/test_session tests/bin/test_server tests/bin/test_server_apis \
               tests/bin/test_spec tests/bin/test_slots tests/bin/test_prediction
$(ENGINE_TESTS): $(SOURCES)

# The binaries build in parallel (one job per core: about 20 compilations include glm.c), then
# the suite runs.
NPROC       := $(shell nproc 2>/dev/null || echo 2)
test:
	$(MAKE) -j$(NPROC) test-bins
	bash tests/run.sh
test-bins: glm $(TEST_BINS) $(TOOL_BINS) $(FUZZ_REPLAYS) $(if $(HAVE_CLANG),$(FUZZ_BINS)) \
           $(if $(HAVE_AARCH64),$(AARCH64_BINS)) $(if $(HAVE_QEMU_X86),$(X86_V3_BINS))

# The whole suite once more under AddressSanitizer + UBSan with leak detection (a separate build).
# Every sanitizer report goes to a log file, so one found in a test that does not look at exit
# codes still fails `make asan`.
# One line is not a report: LeakSanitizer's "Unable to get registers from thread N", written when
# a test kills a process (SIGTERM, SIGKILL) while its exit-time leak check stops its threads; a
# log holding only that line is dropped.
ASAN_LOGS = /tmp/glm-asan-logs.$(shell echo $$PPID)
asan:
	$(MAKE) clean-bins
	$(MAKE) CFLAGS="-O1 -g -march=$(ARCH) -fopenmp -std=gnu11 -Wall -Wextra -ffp-contract=off -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" glm $(TEST_BINS) $(TOOL_BINS) $(FUZZ_REPLAYS)
	rm -rf $(ASAN_LOGS) && mkdir -p $(ASAN_LOGS)
	ASAN_OPTIONS=detect_leaks=1:log_path=$(ASAN_LOGS)/asan UBSAN_OPTIONS=print_stacktrace=1:log_path=$(ASAN_LOGS)/ubsan \
	  bash tests/run.sh; rc=$$?; $(MAKE) clean-bins; \
	  for f in $(ASAN_LOGS)/*; do [ -f "$$f" ] && ! grep -qv 'Unable to get registers from thread' "$$f" && rm -f "$$f"; done; \
	  if ls $(ASAN_LOGS)/* >/dev/null 2>&1; then echo "FAIL sanitizer reports ($(ASAN_LOGS)):"; head -40 $(ASAN_LOGS)/*; exit 1; fi; \
	  rm -rf $(ASAN_LOGS); exit $$rc

# A first run without the big model: DEMO_DIR gets the small oracle model of the tests (GLM-5.2's
# architecture at toy sizes, random weights) and the tiny test tokenizer, in the formats glm reads.
# Its text is meaningless: it shows the engine working, not the model.
DEMO_DIR ?= demo-model
DEMO_FILES = tests/fixtures/oracle_sparse/config.json tests/fixtures/oracle_sparse/generation_config.json \
             tests/fixtures/oracle_sparse/model-00001-of-00001.safetensors \
             tests/fixtures/oracle_sparse/out-mtp-00000.safetensors tests/fixtures/tiny_tokenizer/tokenizer.json
demo: glm
	@mkdir -p $(DEMO_DIR) && cp $(DEMO_FILES) $(DEMO_DIR)/
	@echo
	@echo "$(DEMO_DIR)/ holds a small model with random weights (4 layers, 16 experts, 512 tokens)."
	@echo "Its answers are meaningless text: it shows the engine working, not GLM-5.2. Try:"
	@echo "  SNAP=$(DEMO_DIR) ./glm                          # chat in the terminal (Ctrl-D quits)"
	@echo "  SNAP=$(DEMO_DIR) PROMPT='Hello' NGEN=40 ./glm  # one answer"
	@echo "  SNAP=$(DEMO_DIR) SERVE=8080 ./glm              # chat page and APIs at http://127.0.0.1:8080/"

ENGINE_BENCHES = bench/session_bench bench/specbench bench/attnbench bench/slotbench bench/ttft_bench
bench: bench/kbench $(ENGINE_BENCHES) bench/grammarbench
bench/kbench: bench/kbench.c $(SOURCES)
	$(CC) $(CFLAGS) -I. -o $@ $< $(LDLIBS)
$(ENGINE_BENCHES): bench/%: bench/%.c $(SOURCES)
	$(CC) $(CFLAGS) -I. -o $@ $< $(LDLIBS)
# grammar.h alone (no engine): allowed-token masks on a 154,880-token vocabulary
bench/grammarbench: bench/grammarbench.c $(HEADERS)
	$(CC) $(CFLAGS) -I. -o $@ $< $(LDLIBS)

clean-bins:
	rm -f glm $(AARCH64_BINS) $(X86_V3_BINS) $(TEST_BINS) $(TOOL_BINS) $(FUZZ_REPLAYS) bench/kbench bench/session_bench bench/specbench \
	      bench/attnbench bench/grammarbench bench/slotbench bench/ttft_bench

clean: clean-bins
	rm -rf tests/bin web_assets.h
