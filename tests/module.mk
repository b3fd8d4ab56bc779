# tests/: unit tests (tests/unit/*_test.c, one binary each, linked with the
# harness and every library), simulation tests (tests/sim/), shell tests.
T_MAIN_OBJ := $(O)/tests/t_main.o

# All project libraries, most dependent first (static link order).
SK_LIBS = $(LIB_AGENT) $(LIB_JOBS) $(LIB_RAFT) $(LIB_MEMBERSHIP) $(LIB_PROTO) $(LIB_COMMON)

UNIT_SRC := $(wildcard tests/unit/*_test.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(O)/tests/%)
TESTS += $(UNIT_BIN)

$(O)/tests/%_test: $(O)/tests/unit/%_test.o $(T_MAIN_OBJ) $(SK_LIBS) $(TEST_EXTRA_LIBS)
	$(CC) $(LDFLAGS) -o $@ $< $(T_MAIN_OBJ) $(TEST_EXTRA_LIBS) $(SK_LIBS) $(LDLIBS)

# Test tools (tests/tools/*.c): programs the shell tests drive, one file each,
# in $(O)/tests/tools/; make test tells the tests where (SKEIN_TOOLS).
TOOL_SRC := $(wildcard tests/tools/*.c)
TOOL_BIN := $(TOOL_SRC:tests/tools/%.c=$(O)/tests/tools/%)
$(O)/tests/tools/%: $(O)/tests/tools/%.o $(SK_LIBS)
	$(CC) $(LDFLAGS) -o $@ $< $(SK_LIBS) -lev $(LDLIBS)
all: $(TOOL_BIN)

# Style: no function over 120 lines (tools/fnlen.sh).
TEST_SCRIPTS += tests/style/fnlen_test.sh
CHECK_SCRIPTS += tests/style/fnlen_test.sh

-include tests/sim/module.mk
-include tests/fuzz/module.mk
-include tests/tools/module.mk
-include tests/fakecuda/module.mk
-include tests/deploy/module.mk
