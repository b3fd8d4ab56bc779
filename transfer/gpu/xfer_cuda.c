/* transfer/gpu/xfer_cuda.c: the CUDA runtime (and one driver call), loaded with
 * dlopen so that libskein builds and runs where there is no CUDA at all.
 *
 * We declare the few prototypes we use ourselves (cudaError_t is an int-sized
 * enum, streams are pointers, cudaIpcMemHandle_t is 64 bytes passed by value)
 * instead of including cuda_runtime.h.  The library is found by name
 * (libcudart.so, .so.13, .so.12), or at $SKEIN_CUDART_LIB, or under
 * /usr/local/cuda/lib64.  The first call decides, once, and keeps the reason
 * when CUDA cannot be used ("no library", "no device: <cuda error>"). */
#include "transfer/core/xfer_int.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static xfer_cuda_api g_cu;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void *open_first(const char *env, const char *const *names, char *tried, size_t n)
{
	const char *e = getenv(env);
	void *h = NULL;
	if (e && *e && (h = dlopen(e, RTLD_NOW | RTLD_GLOBAL))) return h;
	for (size_t i = 0; names[i]; i++)
		if ((h = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL))) return h;
	snprintf(tried, n, "%s", dlerror() ? "not found" : "not found");
	return NULL;
}

#define LOAD(h, field, sym)                                                            \
	do {                                                                           \
		*(void **)&g_cu.field = dlsym(h, sym);                                 \
		if (!g_cu.field) {                                                     \
			snprintf(g_cu.why, sizeof g_cu.why, "%s lacks %s", #h, sym);   \
			return;                                                        \
		}                                                                      \
	} while (0)

static void load(void)
{
	static const char *const rt[] = { "libcudart.so", "libcudart.so.13", "libcudart.so.12",
					   "/usr/local/cuda/lib64/libcudart.so", NULL };
	static const char *const drv[] = { "libcuda.so.1", "libcuda.so", NULL };
	char tried[64];
	g_cu.h_rt = open_first("SKEIN_CUDART_LIB", rt, tried, sizeof tried);
	if (!g_cu.h_rt) {
		snprintf(g_cu.why, sizeof g_cu.why,
			 "the CUDA runtime (libcudart.so) was not found; set SKEIN_CUDART_LIB to its path");
		return;
	}
	void *h_rt = g_cu.h_rt;
	LOAD(h_rt, GetErrorString, "cudaGetErrorString");
	LOAD(h_rt, GetDeviceCount, "cudaGetDeviceCount");
	LOAD(h_rt, SetDevice, "cudaSetDevice");
	LOAD(h_rt, Malloc, "cudaMalloc");
	LOAD(h_rt, Free, "cudaFree");
	LOAD(h_rt, MallocHost, "cudaMallocHost");
	LOAD(h_rt, FreeHost, "cudaFreeHost");
	LOAD(h_rt, Memcpy, "cudaMemcpy");
	LOAD(h_rt, MemcpyAsync, "cudaMemcpyAsync");
	LOAD(h_rt, Memset, "cudaMemset");
	LOAD(h_rt, StreamCreate, "cudaStreamCreate");
	LOAD(h_rt, StreamDestroy, "cudaStreamDestroy");
	LOAD(h_rt, StreamSynchronize, "cudaStreamSynchronize");
	LOAD(h_rt, StreamQuery, "cudaStreamQuery");
	LOAD(h_rt, DeviceSynchronize, "cudaDeviceSynchronize");
	LOAD(h_rt, IpcGetMemHandle, "cudaIpcGetMemHandle");
	LOAD(h_rt, IpcOpenMemHandle, "cudaIpcOpenMemHandle");
	LOAD(h_rt, IpcCloseMemHandle, "cudaIpcCloseMemHandle");
	*(void **)&g_cu.MemGetInfo = dlsym(h_rt, "cudaMemGetInfo"); /* optional (the stand-in lacks it) */
	int count = 0, rc = g_cu.GetDeviceCount(&count);
	if (rc != 0 || count <= 0) {
		snprintf(g_cu.why, sizeof g_cu.why, "no CUDA device (cudaGetDeviceCount: %s, %d devices)",
			 rc ? g_cu.GetErrorString(rc) : "ok", count);
		return;
	}
	/* The driver's cuMemGetAddressRange finds the allocation a pointer is in
	 * (an IPC handle covers a whole allocation). */
	g_cu.h_drv = open_first("SKEIN_CUDA_LIB", drv, tried, sizeof tried);
	if (g_cu.h_drv) {
		void *h_drv = g_cu.h_drv;
		LOAD(h_drv, DrvInit, "cuInit");
		LOAD(h_drv, MemGetAddressRange, "cuMemGetAddressRange_v2");
		g_cu.DrvInit(0);
	}
	g_cu.ok = 1;
}

const xfer_cuda_api *xfer_cuda(char *why, size_t n)
{
	pthread_once(&g_once, load);
	if (g_cu.ok) return &g_cu;
	if (why && n) snprintf(why, n, "%s", g_cu.why);
	return NULL;
}

/* A stream that neither waits for the legacy default stream (cudaMemcpy,
 * other threads' plain streams) nor makes it wait; a plain stream where the
 * runtime lacks cudaStreamCreateWithFlags (an old or stand-in one). */
int xfer_cuda_stream_nonblocking(const xfer_cuda_api *cu, void **stream, const char *what, xfer_err *err)
{
	int (*with_flags)(void **, unsigned);
	*(void **)&with_flags = cu->h_rt ? dlsym(cu->h_rt, "cudaStreamCreateWithFlags") : NULL;
	int rc = with_flags ? with_flags(stream, 1 /* cudaStreamNonBlocking */) : cu->StreamCreate(stream);
	return xfer_cuda_check(cu, rc, what, err);
}

int xfer_cuda_check(const xfer_cuda_api *cu, int rc, const char *what, xfer_err *err)
{
	if (rc == 0) return 0;
	return xfer_fail(err, XFER_EIO, "%s: CUDA error %d (%s)", what, rc, cu->GetErrorString(rc));
}

int xfer_cuda_copy(const xfer_cuda_api *cu, void *dst, xfer_mem dm, const void *src, xfer_mem sm,
		   size_t n, xfer_err *err)
{
	if (dm == XFER_MEM_HOST && sm == XFER_MEM_HOST) {
		memcpy(dst, src, n);
		return 0;
	}
	int kind = (dm == XFER_MEM_CUDA ? 1 : 0) | (sm == XFER_MEM_CUDA ? 2 : 0);
	static const int kinds[4] = { XFER_CUDA_H2H, XFER_CUDA_H2D, XFER_CUDA_D2H, XFER_CUDA_D2D };
	return xfer_cuda_check(cu, cu->Memcpy(dst, src, n, kinds[kind]), "cudaMemcpy", err);
}
