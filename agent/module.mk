# agent/: skeind and libskagent (what skeind and skeinctl share); the
# member supervisor lives in agent/sup/ (it includes only common/), skeinctl
# in ctl/ (ctl/module.mk).
AGENT_SUP_SRC := agent/sup/agent_sup.c agent/sup/agent_files.c agent/sup/agent_cgroup.c
AGENT_LIB_SRC := agent/agent_state.c agent/agent_update_show.c agent/agent_crypto.c agent/agent_rpc.c agent/agent_auth.c agent/agent_wire.c agent/agent_opts.c $(AGENT_SUP_SRC)
SKEIND_SRC := agent/agent_main.c agent/agent_pump.c agent/agent_net.c agent/agent_tcp.c agent/agent_net_util.c agent/agent_ctl.c agent/agent_reply.c agent/agent_gpu.c agent/agent_head.c agent/agent_head_cmd.c agent/agent_peer.c agent/agent_jobs.c agent/agent_jobs_base.c agent/agent_jobs_cmd.c \
	agent/agent_metrics.c agent/agent_stats.c agent/agent_http.c agent/agent_drain.c agent/agent_update.c agent/agent_update_table.c agent/agent_update_gate.c
LIB_AGENT := $(O)/libskagent.a
$(LIB_AGENT): $(AGENT_LIB_SRC:%.c=$(O)/%.o)
	$(AR) rcs $@ $^
LDLIBS += -lssl -lcrypto -ldl
# agent_sup.c (in libskagent.a) uses libev: unit tests that link the library need it too
LDLIBS += -lev

$(BIN)/skeind: $(SKEIND_SRC:%.c=$(O)/%.o) $(LIB_AGENT) $(LIB_JOBS) $(LIB_RAFT) $(LIB_MEMBERSHIP) $(LIB_PROTO) $(LIB_COMMON)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ -lev $(LDLIBS)

PROGRAMS += $(BIN)/skeind

TEST_SCRIPTS += tests/agent/cluster_test.sh tests/agent/security_test.sh tests/agent/auth_test.sh tests/agent/badinput_test.sh tests/agent/head_test.sh \
	tests/agent/partition_test.sh tests/agent/head_partition_test.sh tests/agent/jobs_test.sh \
	tests/agent/jobs_partition_test.sh tests/agent/jobs_chaos_test.sh tests/agent/restart_test.sh \
	tests/agent/hygiene_test.sh tests/agent/flood_test.sh tests/agent/metrics_test.sh tests/agent/drain_test.sh \
	tests/agent/clock_test.sh tests/agent/colocated_test.sh tests/agent/updates_test.sh \
	tests/agent/updates_partition_test.sh tests/agent/updates_chaos_test.sh tests/agent/layers_test.sh \
	tests/agent/ctl_test.sh tests/agent/updates_forge_test.sh tests/agent/updates_events_test.sh
TEST_SCRIPTS += tests/agent/disk_dir_test.sh tests/agent/formats_test.sh
CHECK_SCRIPTS += tests/agent/layers_test.sh
BENCH_SCRIPTS += tests/agent/bench.sh tests/agent/auth_bench.sh tests/agent/head_bench.sh tests/agent/etcd_bench.sh tests/agent/idle_bench.sh tests/agent/jobs_bench.sh tests/agent/jobs_scale_bench.sh \
	tests/agent/metrics_bench.sh tests/agent/updates_bench.sh
