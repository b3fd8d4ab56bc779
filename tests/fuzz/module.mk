# tests/fuzz/: libFuzzer targets, built with clang from the sources (not the
# gcc-built libraries) and run for FUZZ_SECONDS each by `make fuzz`.
FUZZ_SECONDS ?= 30
FUZZ_CC ?= clang
FUZZ_FLAGS := -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -I. -Ibuild/release/gen -D_GNU_SOURCE
FUZZ_LIB_SRC = $(MBR_SRC) $(filter-out %.proto,$(wildcard proto/*.c)) build/release/gen/proto/gossip.pb-c.c $(COMMON_SRC)
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,build/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))

build/fuzz/%: tests/fuzz/%.c $(FUZZ_LIB_SRC)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $^ -lprotobuf-c -lm

fuzz: $(FUZZ_TARGETS)
	@set -e; for t in $(FUZZ_TARGETS); do \
		mkdir -p build/fuzz/corpus-$$(basename $$t); \
		echo "== $$t ($(FUZZ_SECONDS) s)"; \
		$$t -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -print_final_stats=1 build/fuzz/corpus-$$(basename $$t) 2>&1 | tail -n 12; \
	done
