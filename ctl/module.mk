# ctl/: skeinctl, the operator's command line (one file; what it shares with
# skeind comes from libskagent).
SKEINCTL_SRC := ctl/ctl_main.c

$(BIN)/skeinctl: $(SKEINCTL_SRC:%.c=$(O)/%.o) $(LIB_AGENT) $(LIB_JOBS) $(LIB_MEMBERSHIP) $(LIB_PROTO) $(LIB_COMMON)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ -lev $(LDLIBS)

PROGRAMS += $(BIN)/skeinctl
