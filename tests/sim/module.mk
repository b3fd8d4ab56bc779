# tests/sim/: the many-node simulator (a library for the tests and the CLI),
# bin/skein-sim, the simulation tests, the CLI test and the benchmark.
SIM_LIB_OBJ := $(O)/tests/sim/sim.o
SIM_TEST_BIN := $(O)/tests/sim/sim_test

PROGRAMS += $(BIN)/skein-sim
# The scripts (cli.sh, bench.sh) run the binary of the build at hand.
export SKEIN_SIM := $(BIN)/skein-sim
TESTS += $(SIM_TEST_BIN)
BENCH_SCRIPTS += tests/sim/bench.sh

$(BIN)/skein-sim: $(O)/tests/sim/skein_sim.o $(O)/tests/sim/sim_coord.o $(SIM_LIB_OBJ) $(SK_LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(O)/tests/sim/sim_coord.o $(SIM_LIB_OBJ) $(SK_LIBS) $(LDLIBS)

$(SIM_TEST_BIN): $(O)/tests/sim/sim_test.o $(SIM_LIB_OBJ) $(T_MAIN_OBJ) $(SK_LIBS)
	$(CC) $(LDFLAGS) -o $@ $< $(SIM_LIB_OBJ) $(T_MAIN_OBJ) $(SK_LIBS) $(LDLIBS)

# The CLI's contract (flags, exit codes, JSON keys), as a shell test.
TEST_SCRIPTS += tests/sim/cli.sh
# `skein-sim coord`: the coordinator at scale (issue 25).
TEST_SCRIPTS += tests/sim/coord.sh
