# proto/: the .proto files and the frame around them; no I/O.
# protoc-c output goes to $(O)/gen/proto/, never into the source tree.
PROTO_FILES := $(wildcard proto/*.proto)
PROTO_C := $(PROTO_FILES:%.proto=$(O)/gen/%.pb-c.c)
PROTO_H := $(PROTO_FILES:%.proto=$(O)/gen/%.pb-c.h)
GEN_HEADERS += $(PROTO_H)

$(O)/gen/proto/%.pb-c.c $(O)/gen/proto/%.pb-c.h: proto/%.proto | $(DEPS_OK)
	@mkdir -p $(O)/gen
	protoc-c --c_out=$(O)/gen $<

PROTO_SRC := $(filter-out %.proto,$(wildcard proto/*.c))
PROTO_OBJ := $(PROTO_SRC:%.c=$(O)/%.o) $(PROTO_C:%.c=%.o)
LIB_PROTO := $(O)/libskproto.a
$(LIB_PROTO): $(PROTO_OBJ)
	$(AR) rcs $@ $^
LDLIBS += -lprotobuf-c
