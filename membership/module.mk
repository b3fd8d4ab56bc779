# membership/: SWIM + Lifeguard as pure logic, and its codec.
MBR_SRC := $(wildcard membership/*.c)
MBR_OBJ := $(MBR_SRC:%.c=$(O)/%.o)
LIB_MEMBERSHIP := $(O)/libskmbr.a
$(LIB_MEMBERSHIP): $(MBR_OBJ)
	$(AR) rcs $@ $^
