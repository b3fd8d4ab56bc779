# common/: small helpers every module may use.
COMMON_SRC := $(wildcard common/*.c)
COMMON_OBJ := $(COMMON_SRC:%.c=$(O)/%.o)
LIB_COMMON := $(O)/libskcommon.a
$(LIB_COMMON): $(COMMON_OBJ)
	$(AR) rcs $@ $^
