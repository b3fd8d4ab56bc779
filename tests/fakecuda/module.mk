# tests/fakecuda/: a stand-in CUDA runtime (a shared library libskein
# dlopens through SKEIN_CUDART_LIB) for tests of the colocated path on
# machines without a GPU; make test tells the tests where (SKEIN_FAKE_CUDART).
FAKE_CUDART := $(O)/tests/libfake_cudart.so
PROGRAMS += $(FAKE_CUDART)
export SKEIN_FAKE_CUDART := $(abspath $(FAKE_CUDART))

$(FAKE_CUDART): tests/fakecuda/fake_cudart.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -O1 -g -Wall -Wextra -Werror -D_GNU_SOURCE -fPIC -shared -o $@ $< -lpthread -lrt
