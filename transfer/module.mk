# transfer/: libskein, the weight-transfer library (static and shared):
# include/ (the public header), core/, paths/, gpu/ (gpu/gen/: generated),
# update/ (the coordinated-update client), engine/ (the stock-engine
# protocol); tools/ holds the programs that link it (the benchmark, the
# stand-in trainer and engine, the synthetic model), not part of it.
# libskein needs libxxhash, libzstd and libprotobuf-c (the coordinated
# update's messages, proto/weights.proto and control.proto, compiled -fPIC
# into libskein itself: libskproto's objects are not PIC); CUDA, NCCL and UCX (libucp.so.0,
# for p2p-ucx; its headers from libucx-dev when present, found with
# __has_include) are loaded with dlopen at run time.  Hand-written verbs
# (p2p-rdma) are not written: its probe says so.
XFER_DIRS := core paths gpu gpu/gen update engine
XFER_SRC := $(foreach d,$(XFER_DIRS),$(wildcard transfer/$(d)/*.c))
XFER_OBJ := $(XFER_SRC:%.c=$(O)/%.o)
XFER_PB_OBJ := $(O)/transfer/pb/weights.pb-c.o $(O)/transfer/pb/control.pb-c.o
LIB_XFER := $(O)/libskein.a
LIB_XFER_SO := $(O)/libskein.so
XFER_HAVE_VERBS := $(shell test -e /usr/include/infiniband/verbs.h && echo 1)
XFER_LIBS := -lxxhash -lzstd -lprotobuf-c -ldl -lpthread -lm

# -fvisibility=hidden: libskein.so exports only what skein_xfer.h marks
# SKEIN_API (tests/transfer/exports.sh counts them); the static library keeps
# every symbol for the unit tests and the tools.
$(XFER_OBJ): CFLAGS += -fPIC -fvisibility=hidden $(if $(XFER_HAVE_VERBS),-DXFER_HAVE_VERBS)

$(XFER_PB_OBJ): $(O)/transfer/pb/%.o: $(O)/gen/proto/%.c | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -Wno-shadow -fPIC -fvisibility=hidden -c -o $@ $<

# rm first: ar keeps members whose source was renamed or removed (an old
# object would still define the symbols its successor defines)
$(LIB_XFER): $(XFER_OBJ) $(XFER_PB_OBJ)
	rm -f $@
	$(AR) rcs $@ $^
$(LIB_XFER_SO): $(XFER_OBJ) $(XFER_PB_OBJ)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,libskein.so -o $@ $^ $(XFER_LIBS)

XFER_SIM_OBJ := $(O)/transfer/tools/xfer_sim.o
$(BIN)/skein-xfer-bench: $(O)/transfer/tools/xfer_bench.o $(XFER_SIM_OBJ) $(LIB_XFER)
$(BIN)/skein-trainer-sim: $(O)/transfer/tools/xfer_trainer_sim.o $(XFER_SIM_OBJ) $(LIB_XFER)
$(BIN)/skein-engine-sim: $(O)/transfer/tools/xfer_engine_sim.o $(XFER_SIM_OBJ) $(LIB_XFER)
$(BIN)/skein-xfer-bench $(BIN)/skein-trainer-sim $(BIN)/skein-engine-sim:
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(XFER_LIBS) $(LDLIBS)

PROGRAMS += $(LIB_XFER) $(LIB_XFER_SO) $(BIN)/skein-xfer-bench $(BIN)/skein-trainer-sim \
	$(BIN)/skein-engine-sim

# Unit tests: tests/module.mk (included after this file) links every
# tests/unit/*_test.c with $(TEST_EXTRA_LIBS) and $(LDLIBS).
TEST_EXTRA_LIBS += $(LIB_XFER)
LDLIBS += $(XFER_LIBS)
TEST_SCRIPTS += tests/transfer/sims.sh tests/transfer/gpu_kernels_fresh.sh tests/transfer/exports.sh
CHECK_SCRIPTS += tests/transfer/gpu_kernels_fresh.sh tests/transfer/exports.sh
BENCH_SCRIPTS += tests/transfer/bench.sh
