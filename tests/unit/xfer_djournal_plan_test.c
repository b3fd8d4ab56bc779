/* tests/unit/xfer_djournal_plan_test.c: how the device undo journal is sized
 * at open (transfer/gpu/xfer_cuda_journal.c, issue 27): the budget from the
 * device's free memory, capped at 2x the model, the flag overriding; the
 * pinned spill pool under the node's cap.  Pure functions: no GPU. */
#include "tests/unit/xfer_testlib.h"
#include "transfer/gpu/xfer_gpu.h"

#include <stdlib.h>

#define GiB (1ull << 30)
#define MiB (1ull << 20)

T_TEST(xfer_djournal_budget_from_free_memory_capped_at_twice_the_model)
{
	/* the H200: 3.44 GB model, ~135 GiB free at open: 2x the model
	 * (a version changing every word fits: no spill, no pinned copies) */
	uint64_t model = 3440000000ull;
	T_EQ(xfer_djournal_budget(0, 135 * GiB, model), 2 * model);
	/* a model of a quarter of the device: an eighth of what is free */
	T_EQ(xfer_djournal_budget(0, 96 * GiB, 35 * GiB), 12 * GiB);
	/* the flag overrides, both ways (at least 1 MiB) */
	T_EQ(xfer_djournal_budget(8 * GiB, 135 * GiB, model), 8 * GiB);
	T_EQ(xfer_djournal_budget(64 * GiB, 1 * GiB, model), 64 * GiB);
	T_EQ(xfer_djournal_budget(5, 135 * GiB, model), 1 * MiB);
	/* free memory unknown: the old 256 MiB, capped the same */
	T_EQ(xfer_djournal_budget(0, 0, 10 * GiB), 256 * MiB);
	T_EQ(xfer_djournal_budget(0, 0, 64 * MiB), 128 * MiB);
	/* a nearly full device: at least 1 MiB (then spills) */
	T_EQ(xfer_djournal_budget(0, 2 * MiB, 10 * GiB), 1 * MiB);
	/* entries are 16 bytes: the budget is a multiple */
	T_EQ(xfer_djournal_budget(0, 8 * GiB + 77, 100 * GiB) % 16, 0);
}

T_TEST(xfer_djournal_pool_covers_a_full_change_under_the_pinned_cap)
{
	T_EQ(xfer_djournal_pool_bytes(2 * GiB, 1 * GiB, 16 * GiB), 0); /* the device holds it all */
	T_EQ(xfer_djournal_pool_bytes(12 * GiB, 35 * GiB, 64 * GiB), 58 * GiB);
	T_EQ(xfer_djournal_pool_bytes(12 * GiB, 35 * GiB, 16 * GiB), 16 * GiB);
	T_EQ(xfer_djournal_pool_bytes(256 * MiB, 1 * GiB, 0), 0);
}

T_TEST(xfer_djournal_pinned_cap_from_the_environment)
{
	/* the stand-in CUDA runtime is not loaded here: no device count, the
	 * whole node's cap */
	unsetenv("SKEIN_CUDART_LIB");
	setenv("SKEIN_PINNED_BYTES", "1073741824", 1);
	uint64_t c = xfer_djournal_pinned_cap();
	T_CHECK(c > 0 && c <= GiB);
	setenv("SKEIN_PINNED_BYTES", "0", 1);
	T_EQ(xfer_djournal_pinned_cap(), 0);
	setenv("SKEIN_PINNED_BYTES", "lots", 1); /* not a number: the default */
	T_CHECK(xfer_djournal_pinned_cap() > 0);
	unsetenv("SKEIN_PINNED_BYTES");
}
