# tests/fakecuda/: a stand-in CUDA runtime (a shared library libskein
# dlopens through SKEIN_CUDART_LIB) for tests of the colocated path on
# machines without a GPU; make test tells the tests where (SKEIN_FAKE_CUDART).
FAKE_CUDART := $(O)/tests/libfake_cudart.so
PROGRAMS += $(FAKE_CUDART)
export SKEIN_FAKE_CUDART := $(abspath $(FAKE_CUDART))

$(FAKE_CUDART): tests/fakecuda/fake_cudart.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -O1 -g -Wall -Wextra -Werror -D_GNU_SOURCE -fPIC -shared -o $@ $< -lpthread -lrt

# A stand-in libnccl over shared memory (SKEIN_NCCL_LIB) for the broadcast
# paths' tests between processes (tests/unit/xfer_nccl_test.c).
FAKE_NCCL := $(O)/tests/libfake_nccl.so
PROGRAMS += $(FAKE_NCCL)
export SKEIN_FAKE_NCCL := $(abspath $(FAKE_NCCL))

$(FAKE_NCCL): tests/fakecuda/fake_nccl.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -O1 -g -Wall -Wextra -Werror -D_GNU_SOURCE -fPIC -shared -o $@ $< -lrt -ldl
