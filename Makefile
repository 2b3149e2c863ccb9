# glm.c build. `make` builds ./glm for this CPU; `make ARCH=x86-64-v3` builds a portable binary
# (the integer kernels still pick AVX2 or AVX-512 VNNI at run time from what the CPU supports).
CC      ?= gcc
ARCH    ?= native
# -ffp-contract=off: no silent FMA contraction, so float results match the scalar reference and the
# oracle's separately rounded operations (glm_moe_dsa.md §7.8).
CFLAGS  ?= -O3 -march=$(ARCH) -fopenmp -std=gnu11 -Wall -Wextra -ffp-contract=off
LDLIBS  = -lm
HEADERS = $(wildcard *.h)
# --version names the commit it was built from
GLM_COMMIT := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)

# every tests/test_NAME.c is a unit-test binary tests/bin/test_NAME
TEST_BINS = $(patsubst tests/%.c,tests/bin/%,$(wildcard tests/test_*.c))

.PHONY: all test asan bench clean
all: glm

glm: glm.c $(HEADERS)
	$(CC) $(CFLAGS) -DGLM_COMMIT='"$(GLM_COMMIT)"' -o $@ glm.c $(LDLIBS)

tests/bin/%: tests/%.c $(HEADERS)
	@mkdir -p tests/bin
	$(CC) $(CFLAGS) -I. -o $@ $< $(LDLIBS)

# Programs the shell tests drive (not run directly by tests/run.sh).
TEST_TOOLS = tests/bin/http_echo

# tests that include glm.c itself (GLM_NO_MAIN)
tests/bin/test_generator: glm.c
tests/bin/test_spec: glm.c

test: glm $(TEST_BINS) $(TEST_TOOLS)
	bash tests/run.sh

# The whole suite once more under AddressSanitizer + UBSan with leak detection (a separate build).
# Every sanitizer report goes to a log file, so one found in a test that does not look at exit
# codes still fails `make asan`.
ASAN_LOGS = /tmp/glm-asan-logs.$(shell echo $$PPID)
asan:
	$(MAKE) clean-bins
	$(MAKE) CFLAGS="-O1 -g -march=$(ARCH) -fopenmp -std=gnu11 -Wall -Wextra -ffp-contract=off -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" glm $(TEST_BINS) $(TEST_TOOLS)
	rm -rf $(ASAN_LOGS) && mkdir -p $(ASAN_LOGS)
	ASAN_OPTIONS=detect_leaks=1:log_path=$(ASAN_LOGS)/asan UBSAN_OPTIONS=print_stacktrace=1:log_path=$(ASAN_LOGS)/ubsan \
	  bash tests/run.sh; rc=$$?; $(MAKE) clean-bins; \
	  if ls $(ASAN_LOGS)/* >/dev/null 2>&1; then echo "FAIL sanitizer reports ($(ASAN_LOGS)):"; head -40 $(ASAN_LOGS)/*; exit 1; fi; \
	  rm -rf $(ASAN_LOGS); exit $$rc

bench: bench/kbench bench/specbench
bench/kbench: bench/kbench.c quant.h
	$(CC) $(CFLAGS) -I. -o $@ $< $(LDLIBS)
bench/specbench: bench/specbench.c glm.c $(HEADERS)
	$(CC) $(CFLAGS) -I. -o $@ $< $(LDLIBS)

clean-bins:
	rm -f glm $(TEST_BINS) $(TEST_TOOLS) bench/kbench bench/specbench

clean: clean-bins
	rm -rf tests/bin
