# glm.c build. `make` builds ./glm for this CPU; `make ARCH=x86-64-v3` builds a portable binary
# (the integer kernels still pick AVX2, AVX-VNNI or AVX-512 VNNI at run time from what the CPU supports).
CC      ?= gcc
ARCH    ?= native
# -ffp-contract=off: no silent FMA contraction, so float results match the scalar reference and the
# oracle's separately rounded operations (glm_moe_dsa.md §7.8).
CFLAGS  ?= -O3 -march=$(ARCH) -fopenmp -std=gnu11 -Wall -Wextra -ffp-contract=off
LDLIBS  = -lm
HEADERS = $(wildcard *.h)

TEST_BINS = tests/bin/test_st tests/bin/test_json tests/bin/test_quant tests/bin/test_tok tests/bin/test_tier

.PHONY: all test asan bench clean
all: glm

glm: glm.c $(HEADERS)
	$(CC) $(CFLAGS) -o $@ glm.c $(LDLIBS)

tests/bin/%: tests/%.c $(HEADERS)
	@mkdir -p tests/bin
	$(CC) $(CFLAGS) -I. -o $@ $< $(LDLIBS)

test: glm $(TEST_BINS)
	bash tests/run.sh

# The whole suite once more under AddressSanitizer + UBSan (a separate build directory).
asan:
	$(MAKE) clean-bins
	$(MAKE) CFLAGS="-O1 -g -march=$(ARCH) -fopenmp -std=gnu11 -Wall -Wextra -ffp-contract=off -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" glm $(TEST_BINS)
	ASAN_OPTIONS=detect_leaks=0 bash tests/run.sh
	$(MAKE) clean-bins

bench: bench/kbench
bench/kbench: bench/kbench.c quant.h
	$(CC) $(CFLAGS) -I. -o $@ $< $(LDLIBS)

clean-bins:
	rm -f glm $(TEST_BINS) bench/kbench

clean: clean-bins
	rm -rf tests/bin
