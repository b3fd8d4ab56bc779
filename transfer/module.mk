# transfer/: libskein, the weight-transfer library (static and shared), its
# stand-in trainer and engine, and the benchmark program.
# libskein needs libxxhash, libzstd and libprotobuf-c (the coordinated
# update's messages, proto/weights.proto and control.proto, compiled -fPIC
# into libskein itself: libskproto's objects are not PIC); CUDA, NCCL and UCX (libucp.so.0,
# for p2p-ucx; its headers from libucx-dev when present, found with
# __has_include) are loaded with dlopen at run time.  Hand-written verbs
# (p2p-rdma) are not written: its probe says so.
XFER_PROG_SRC := transfer/xfer_bench.c transfer/xfer_trainer_sim.c transfer/xfer_engine_sim.c
XFER_SRC := $(filter-out $(XFER_PROG_SRC),$(wildcard transfer/*.c transfer/engine/*.c))
XFER_OBJ := $(XFER_SRC:%.c=$(O)/%.o)
XFER_PB_OBJ := $(O)/transfer/pb/weights.pb-c.o $(O)/transfer/pb/control.pb-c.o
LIB_XFER := $(O)/libskein.a
LIB_XFER_SO := $(O)/libskein.so
XFER_HAVE_VERBS := $(shell test -e /usr/include/infiniband/verbs.h && echo 1)
XFER_LIBS := -lxxhash -lzstd -lprotobuf-c -ldl -lpthread -lm

$(XFER_OBJ): CFLAGS += -fPIC $(if $(XFER_HAVE_VERBS),-DXFER_HAVE_VERBS)

$(XFER_PB_OBJ): $(O)/transfer/pb/%.o: $(O)/gen/proto/%.c | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -Wno-shadow -fPIC -c -o $@ $<

$(LIB_XFER): $(XFER_OBJ) $(XFER_PB_OBJ)
	$(AR) rcs $@ $^
$(LIB_XFER_SO): $(XFER_OBJ) $(XFER_PB_OBJ)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,libskein.so -o $@ $^ $(XFER_LIBS)

$(BIN)/skein-xfer-bench: $(O)/transfer/xfer_bench.o $(LIB_XFER)
$(BIN)/skein-trainer-sim: $(O)/transfer/xfer_trainer_sim.o $(LIB_XFER)
$(BIN)/skein-engine-sim: $(O)/transfer/xfer_engine_sim.o $(LIB_XFER)
$(BIN)/skein-xfer-bench $(BIN)/skein-trainer-sim $(BIN)/skein-engine-sim:
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(XFER_LIBS) $(LDLIBS)

PROGRAMS += $(LIB_XFER) $(LIB_XFER_SO) $(BIN)/skein-xfer-bench $(BIN)/skein-trainer-sim \
	$(BIN)/skein-engine-sim

# Unit tests: tests/module.mk (included after this file) links every
# tests/unit/*_test.c with $(TEST_EXTRA_LIBS) and $(LDLIBS).
TEST_EXTRA_LIBS += $(LIB_XFER)
LDLIBS += $(XFER_LIBS)
TEST_SCRIPTS += tests/transfer/sims.sh tests/transfer/gpu_kernels_fresh.sh
BENCH_SCRIPTS += tests/transfer/bench.sh
