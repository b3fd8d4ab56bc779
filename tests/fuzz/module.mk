# tests/fuzz/: libFuzzer targets, one file each (tests/fuzz/fuzz_X.c), built
# with clang.  The sources they test are compiled ONCE into one archive with
# -fsanitize=fuzzer-no-link,address,undefined and every target links against
# it, so a target costs one compile and one link.
#
# A new target: write tests/fuzz/fuzz_X.c (LLVMFuzzerTestOneInput), add any
# source it needs that FUZZ_LIB_SRC lacks, and give it seeds in
# tests/fuzz/corpus/fuzz_X/ (tests/fuzz/gen_corpus.c writes them: make
# fuzz-corpus).  A crash found becomes a file in tests/fuzz/regress/fuzz_X/.
#
#   make fuzz          every target FUZZ_SECONDS (30) each, the corpus kept in build/fuzz/
#   make fuzz-corpus   regenerate tests/fuzz/corpus/ from the real encoders
#   make test          tests/fuzz/fuzz_test.sh: regressions, then FUZZ_TEST_SECONDS (3) each
FUZZ_SECONDS ?= 30
FUZZ_CC ?= clang
FZ := build/fuzz
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS := -std=c11 -g -O1 -fno-omit-frame-pointer -I. -I$(O)/gen -D_GNU_SOURCE -MMD -MP
# Every source any target needs: the decoders and what they call.
FUZZ_LIB_SRC = $(COMMON_SRC) $(PROTO_SRC) $(PROTO_C) $(MBR_SRC) $(RAFT_SRC) $(JOBS_SRC) \
	agent/agent_crypto.c agent/agent_rpc.c agent/agent_auth.c $(XFER_SRC)
FUZZ_LIBS := -lprotobuf-c -lyaml -lssl -lcrypto -lxxhash -lzstd -ldl -lpthread -lm
FUZZ_LIB_OBJ = $(patsubst %.c,$(FZ)/obj/%.o,$(FUZZ_LIB_SRC))
FUZZ_LIB := $(FZ)/libskfuzz.a
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,$(FZ)/%,$(wildcard tests/fuzz/fuzz_*.c))

$(FZ)/obj/%.o: %.c | $(DEPS_OK) $(GEN_HEADERS)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link $(FUZZ_SAN) -c -o $@ $<

$(FUZZ_LIB): $(FUZZ_LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(FZ)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_LIB)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $< $(FUZZ_LIB) $(FUZZ_LIBS)

# The seed corpus comes from the real encoders, not from hand-written bytes.
$(FZ)/gen_corpus: tests/fuzz/gen_corpus.c $(FUZZ_LIB)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SAN) -o $@ $< $(FUZZ_LIB) $(FUZZ_LIBS)

.PHONY: fuzz-build fuzz-corpus fuzz-for-test
fuzz-build: $(FUZZ_TARGETS)
	@:

fuzz-corpus: $(FZ)/gen_corpus
	$(FZ)/gen_corpus tests/fuzz/corpus

fuzz: $(FUZZ_TARGETS)
	@set -e; for t in $(FUZZ_TARGETS); do \
		b=$$(basename $$t); mkdir -p $(FZ)/corpus-$$b $(FZ)/artifacts; \
		echo "== $$t ($(FUZZ_SECONDS) s)"; \
		$$t -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -timeout=10 -print_final_stats=1 \
			-artifact_prefix=$(FZ)/artifacts/$$b- $(FZ)/corpus-$$b tests/fuzz/corpus/$$b 2>&1 | tail -n 12; \
	done

# make test builds the targets when clang is there; without it
# tests/fuzz/fuzz_test.sh fails and says why (tools/deps.sh installs clang).
fuzz-for-test: | $(DEPS_OK) $(GEN_HEADERS)
	@if command -v $(FUZZ_CC) >/dev/null 2>&1; then $(MAKE) --no-print-directory fuzz-build; \
	else echo "tests/fuzz: $(FUZZ_CC) not found; the fuzz test will fail"; fi
test: fuzz-for-test
TEST_SCRIPTS += tests/fuzz/fuzz_test.sh
