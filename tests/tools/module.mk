# tests/tools/: programs the shell tests drive (not tests themselves).
# skein_flood floods a skeind endpoint (tests/agent/flood_test.sh); it is a
# program so that `make` builds it before `make test` runs the scripts.
SKEIN_FLOOD_BIN := $(O)/tests/skein_flood
PROGRAMS += $(SKEIN_FLOOD_BIN)
export SKEIN_FLOOD := $(abspath $(SKEIN_FLOOD_BIN))

$(SKEIN_FLOOD_BIN): $(O)/tests/tools/skein_flood.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $<
