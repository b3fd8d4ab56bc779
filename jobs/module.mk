# jobs/: job specs (Miles's flags and YAML) and placement, as pure logic.
# libskjobs depends on libskproto (jobs.proto) and libyaml.
JOBS_SRC := $(wildcard jobs/*.c)
JOBS_OBJ := $(JOBS_SRC:%.c=$(O)/%.o)
LIB_JOBS := $(O)/libskjobs.a
$(LIB_JOBS): $(JOBS_OBJ)
	$(AR) rcs $@ $^
LDLIBS += -lyaml
