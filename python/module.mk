# python/: the skein package (ctypes over libskein.so, nothing to build) and
# examples/torch (a real PyTorch trainer world and engines under skeind).
# Their tests load $(LIB_XFER_SO) into /usr/bin/python3, which a sanitized
# library cannot join: BUILD=asan leaves them out.
ifneq ($(BUILD),asan)
TEST_SCRIPTS += tests/python/skein_test.py tests/python/journal_test.py examples/torch/run.sh tests/engines/engines_test.sh tests/engines/failover_test.sh tests/engines/modes_test.sh
BENCH_SCRIPTS += tests/python/bench.py tests/engines/bench_cpu.py
endif
test: export SKEIN_LIB := $(abspath $(LIB_XFER_SO))

.PHONY: demo-torch
demo-torch: $(PROGRAMS)
	@SKEIN_LIB=$(abspath $(LIB_XFER_SO)) examples/torch/run.sh
