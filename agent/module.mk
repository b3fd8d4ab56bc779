# agent/: skeind and skeinctl.
AGENT_LIB_SRC := agent/agent_crypto.c agent/agent_rpc.c agent/agent_opts.c
SKEIND_SRC := agent/agent_main.c agent/agent_net.c agent/agent_ctl.c agent/agent_gpu.c agent/agent_head.c
SKEINCTL_SRC := agent/ctl_main.c
LIB_AGENT := $(O)/libskagent.a
$(LIB_AGENT): $(AGENT_LIB_SRC:%.c=$(O)/%.o)
	$(AR) rcs $@ $^
LDLIBS += -lzmq -lssl -lcrypto -ldl

$(BIN)/skeind: $(SKEIND_SRC:%.c=$(O)/%.o) $(LIB_AGENT) $(LIB_RAFT) $(LIB_MEMBERSHIP) $(LIB_PROTO) $(LIB_COMMON)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ -lev $(LDLIBS)

$(BIN)/skeinctl: $(SKEINCTL_SRC:%.c=$(O)/%.o) $(LIB_AGENT) $(LIB_MEMBERSHIP) $(LIB_PROTO) $(LIB_COMMON)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ -lev $(LDLIBS)

PROGRAMS += $(BIN)/skeind $(BIN)/skeinctl

TEST_SCRIPTS += tests/agent/cluster_test.sh tests/agent/security_test.sh tests/agent/badinput_test.sh tests/agent/head_test.sh \
	tests/agent/partition_test.sh tests/agent/head_partition_test.sh
BENCH_SCRIPTS += tests/agent/bench.sh tests/agent/head_bench.sh
