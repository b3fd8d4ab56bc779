# raft/: Raft consensus as pure logic (election, replication, voter changes,
# snapshots), its codec, in-memory and file storage, and the key-value
# state machine, and the storage thread.  libskraft depends on libskproto
# and libskcommon.
RAFT_SRC := $(wildcard raft/*.c)
RAFT_OBJ := $(RAFT_SRC:%.c=$(O)/%.o)
LIB_RAFT := $(O)/libskraft.a
$(LIB_RAFT): $(RAFT_OBJ)
	$(AR) rcs $@ $^
LDLIBS += -lxxhash -lpthread
