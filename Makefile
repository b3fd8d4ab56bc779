# skein: one non-recursive build.  Each module adds its sources, libraries,
# programs and tests through its own module.mk, included below.
#
#   make              build everything (release: -O2 -g), programs in bin/
#   make BUILD=asan   AddressSanitizer + UBSan build, programs in build/asan/bin/
#   make BUILD=debug  -O0 build, programs in build/debug/bin/
#   make test         build and run the test suite; last line "N passed, N failed"
#   make demo         the end-to-end demonstration
#   make bench        the benchmarks (not part of make test)
#   make fuzz         short fuzz runs of every decoder
#   make deps         install the Debian build dependencies (root) or print the command

BUILD ?= release
.DEFAULT_GOAL := all
O := build/$(BUILD)
ifeq ($(BUILD),release)
BIN := bin
else
BIN := $(O)/bin
endif

CC ?= cc
OPT_release := -O2
OPT_debug := -O0
OPT_asan := -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
ifeq ($(origin OPT_$(BUILD)),undefined)
$(error BUILD must be release, debug or asan)
endif

CPPFLAGS := -I. -I$(O)/gen -D_GNU_SOURCE
CFLAGS := -std=c11 -g -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wno-format-truncation $(OPT_$(BUILD)) -MMD -MP
SAN_FLAGS := -fsanitize=address,undefined
LDFLAGS := $(if $(filter asan,$(BUILD)),$(SAN_FLAGS))
LDLIBS := -lm

# Dependencies are checked once per build folder; a fresh machine installs them.
DEPS_OK := $(O)/.deps-ok
$(DEPS_OK): tools/deps.sh
	@tools/deps.sh ensure
	@mkdir -p $(@D) && touch $@

.PHONY: all deps test demo bench fuzz clean
.SECONDARY:
all:

deps:
	@tools/deps.sh install

PROGRAMS :=
TESTS :=
TEST_SCRIPTS :=
BENCH_SCRIPTS :=
GEN_HEADERS :=
OBJS :=

include common/module.mk
include proto/module.mk
include membership/module.mk
include raft/module.mk
include jobs/module.mk
include agent/module.mk
include ctl/module.mk
-include transfer/module.mk
-include python/module.mk
# last: the test rules list every library above as prerequisites
include tests/module.mk

all: $(PROGRAMS) $(SK_LIBS)

$(O)/%.o: %.c | $(DEPS_OK) $(GEN_HEADERS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

$(O)/gen/%.o: $(O)/gen/%.c | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -Wno-shadow -c -o $@ $<

test: $(PROGRAMS) $(TESTS) $(TOOL_BIN)
	@SKEIN_BIN=$(abspath $(BIN)) SKEIN_TOOLS=$(abspath $(O)/tests/tools) tests/run.sh $(TESTS) $(TEST_SCRIPTS)

# Each module appends its benchmark scripts to BENCH_SCRIPTS; they print tables.
bench: $(PROGRAMS)
	@set -e; for b in $(BENCH_SCRIPTS); do echo "== $$b"; $$b; done

demo: $(PROGRAMS)
	@tools/demo.sh

clean:
	rm -rf build bin

-include $(shell find build -name '*.d' 2>/dev/null)
