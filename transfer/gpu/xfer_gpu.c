/* transfer/gpu/xfer_gpu.c: libskein's GPU kernels (transfer/gpu/xfer_gpu.cu) from
 * the host: the embedded fatbin is loaded into the current device's primary
 * context through the CUDA driver API (libcuda, dlopen'd by xfer_cuda.c), once
 * per device, and launched with cuLaunchKernel on the caller's stream.
 *
 * Where there is no GPU, no driver, or no embedded fatbin (a build that
 * left transfer/gpu/gen/xfer_gpu_kernels.c empty), xfer_gpu_new fails with the
 * reason and the callers fall back to the CPU (same bits, far slower).
 *
 * The structs below mirror the kernels' (plain C layout on both sides). */
#include "transfer/gpu/xfer_gpu.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum {
	MAX_DEVICES = 64,
	ATTR_SM_COUNT = 16, /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
	TREE_BLOCK = 256,   /* threads per block: 32 chunks at 8 lanes each */
	UNDO_BLOCK = 256,
};

typedef struct {
	int ok;
	char why[256];
	int (*ModuleLoadData)(void **mod, const void *image);
	int (*ModuleGetFunction)(void **f, void *mod, const char *name);
	int (*LaunchKernel)(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
			    unsigned shmem, void *stream, void **params, void **extra);
	int (*DeviceGetAttribute)(int *v, int attr, int dev);
	int (*GetErrorString)(int rc, const char **s);
	struct { int tried, ok, sms; void *f_tree, *f_jcopy, *f_undo, *f_ctree, *f_tree_d, *f_ctree_d; char why[256]; } dev[MAX_DEVICES];
} drv_api;

static drv_api g_drv;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static void drv_load(void)
{
	char why[256];
	const xfer_cuda_api *cu = xfer_cuda(why, sizeof why);
	if (!cu) {
		snprintf(g_drv.why, sizeof g_drv.why, "%s", why);
		return;
	}
	if (!cu->h_drv) {
		snprintf(g_drv.why, sizeof g_drv.why, "the CUDA driver library (libcuda.so.1) was not found");
		return;
	}
	if (!xfer_gpu_fatbin_len) {
		snprintf(g_drv.why, sizeof g_drv.why, "this libskein was built without GPU kernels "
			 "(transfer/gpu/gen/xfer_gpu_kernels.c is empty: run tools/gen_gpu_kernels.sh where nvcc is)");
		return;
	}
	static const struct { const char *sym; size_t off; } syms[] = {
		{ "cuModuleLoadData", offsetof(drv_api, ModuleLoadData) },
		{ "cuModuleGetFunction", offsetof(drv_api, ModuleGetFunction) },
		{ "cuLaunchKernel", offsetof(drv_api, LaunchKernel) },
		{ "cuDeviceGetAttribute", offsetof(drv_api, DeviceGetAttribute) },
		{ "cuGetErrorString", offsetof(drv_api, GetErrorString) },
	};
	for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
		void *f = dlsym(cu->h_drv, syms[i].sym);
		if (!f) {
			snprintf(g_drv.why, sizeof g_drv.why, "libcuda lacks %s", syms[i].sym);
			return;
		}
		memcpy((char *)&g_drv + syms[i].off, &f, sizeof f);
	}
	g_drv.ok = 1;
}

static int drv_fail(xfer_err *err, const char *what, int rc)
{
	const char *s = NULL;
	if (g_drv.GetErrorString) g_drv.GetErrorString(rc, &s);
	return xfer_fail(err, XFER_EIO, "%s: CUDA driver error %d (%s)", what, rc, s ? s : "?");
}

/* Loads the module into device dev's primary context (current on this
 * thread: the caller set the device through the runtime). */
static int load_device(const xfer_cuda_api *cu, int dev, char *why, size_t n)
{
	pthread_mutex_lock(&g_mu);
	if (!g_drv.dev[dev].tried) {
		g_drv.dev[dev].tried = 1;
		void *mod = NULL;
		xfer_err e = { 0 };
		int rc = cu->Free(NULL); /* makes the runtime's primary context current */
		if (rc != 0) xfer_cuda_check(cu, rc, "cudaFree(NULL)", &e);
		else if ((rc = g_drv.ModuleLoadData(&mod, xfer_gpu_fatbin)) != 0)
			drv_fail(&e, "cuModuleLoadData (libskein's GPU kernels)", rc);
		else if ((rc = g_drv.ModuleGetFunction(&g_drv.dev[dev].f_tree, mod, "skein_tree_chunks")) != 0 ||
			 (rc = g_drv.ModuleGetFunction(&g_drv.dev[dev].f_jcopy, mod, "skein_journal_copy")) != 0 ||
			 (rc = g_drv.ModuleGetFunction(&g_drv.dev[dev].f_undo, mod, "skein_journal_undo")) != 0 ||
			 (rc = g_drv.ModuleGetFunction(&g_drv.dev[dev].f_ctree, mod, "skein_copy_tree")) != 0 ||
			 (rc = g_drv.ModuleGetFunction(&g_drv.dev[dev].f_tree_d, mod, "skein_tree_chunks_direct")) != 0 ||
			 (rc = g_drv.ModuleGetFunction(&g_drv.dev[dev].f_ctree_d, mod, "skein_copy_tree_direct")) != 0)
			drv_fail(&e, "cuModuleGetFunction", rc);
		else if ((rc = g_drv.DeviceGetAttribute(&g_drv.dev[dev].sms, ATTR_SM_COUNT, dev)) != 0)
			drv_fail(&e, "cuDeviceGetAttribute", rc);
		if (e.code == XFER_OK) g_drv.dev[dev].ok = 1;
		snprintf(g_drv.dev[dev].why, sizeof g_drv.dev[dev].why, "%s", e.msg);
	}
	int ok = g_drv.dev[dev].ok;
	if (!ok) snprintf(why, n, "%s", g_drv.dev[dev].why);
	pthread_mutex_unlock(&g_mu);
	return ok ? 0 : -1;
}

xfer_gpu *xfer_gpu_new(int device, xfer_err *err)
{
	pthread_once(&g_once, drv_load);
	if (!g_drv.ok) {
		xfer_fail(err, XFER_EUNAVAIL, "GPU hashing unavailable: %s", g_drv.why);
		return NULL;
	}
	const xfer_cuda_api *cu = xfer_cuda(NULL, 0);
	char why[256];
	if (device < 0 || device >= MAX_DEVICES) {
		xfer_fail(err, XFER_EINVAL, "GPU kernels: device %d out of range", device);
		return NULL;
	}
	if (xfer_cuda_check(cu, cu->SetDevice(device), "cudaSetDevice", err) != 0) return NULL;
	if (load_device(cu, device, why, sizeof why) != 0) {
		xfer_fail(err, XFER_EUNAVAIL, "GPU hashing unavailable: %s", why);
		return NULL;
	}
	xfer_gpu *g = calloc(1, sizeof *g);
	if (!g) {
		xfer_fail(err, XFER_ENOMEM, "out of memory");
		return NULL;
	}
	g->cu = cu;
	g->device = device;
	g->sms = g_drv.dev[device].sms;
	return g;
}

void xfer_gpu_free(xfer_gpu **gp)
{
	if (!gp || !*gp) return;
	xfer_gpu *g = *gp;
	if (g->d_tasks) g->cu->Free(g->d_tasks);
	if (g->h_tasks) g->cu->FreeHost(g->h_tasks);
	if (g->d_hash) g->cu->Free(g->d_hash);
	if (g->h_hash) g->cu->FreeHost(g->h_hash);
	free(g);
	*gp = NULL;
}

/* Grows a device buffer and its pinned host twin to at least n bytes. */
static int grow(xfer_gpu *g, void **d, void **h, size_t *cap, size_t n, xfer_err *err)
{
	if (n <= *cap) return 0;
	size_t c = *cap ? *cap : 4096;
	while (c < n) c *= 2;
	if (*d) g->cu->Free(*d);
	if (*h) g->cu->FreeHost(*h);
	*d = *h = NULL;
	*cap = 0;
	if (xfer_cuda_check(g->cu, g->cu->Malloc(d, c), "cudaMalloc (GPU kernels' scratch)", err) != 0 ||
	    xfer_cuda_check(g->cu, g->cu->MallocHost(h, c), "cudaMallocHost (GPU kernels' scratch)", err) != 0)
		return -1;
	*cap = c;
	return 0;
}

void *xfer_gpu_host_tasks(xfer_gpu *g, size_t bytes, xfer_err *err)
{
	return grow(g, &g->d_tasks, &g->h_tasks, &g->tasks_cap, bytes, err) == 0 ? g->h_tasks : NULL;
}

int xfer_gpu_hash_room(xfer_gpu *g, uint64_t chunks, xfer_err *err)
{
	return grow(g, (void **)&g->d_hash, (void **)&g->h_hash, &g->hash_cap, (chunks + 1) * 8, err);
}

int xfer_gpu_upload_tasks(xfer_gpu *g, void *stream, size_t bytes, xfer_err *err)
{
	return xfer_cuda_check(g->cu, g->cu->MemcpyAsync(g->d_tasks, g->h_tasks, bytes, XFER_CUDA_H2D, stream),
			       "cudaMemcpyAsync (task table)", err);
}

static int launch(void *f, uint64_t blocks, unsigned threads, void *stream, void **params, const char *what,
		  xfer_err *err)
{
	if (!blocks) return 0;
	if (blocks > 0x7fffffff) blocks = 0x7fffffff; /* the kernels stride over the rest */
	int rc = g_drv.LaunchKernel(f, (unsigned)blocks, 1, 1, threads, 1, 1, 0, stream, params, NULL);
	return rc ? drv_fail(err, what, rc) : 0;
}

typedef struct {
	const void *p;
	uint64_t n, first;
} tree_task;

int xfer_gpu_tree_sums(xfer_gpu *g, void *stream, const void *const *p, const uint64_t *n, size_t count,
		       xfer_sum *out, xfer_err *err)
{
	if (!count) return 0;
	tree_task *t = xfer_gpu_host_tasks(g, count * sizeof *t, err);
	if (!t) return -1;
	uint64_t chunks = 0;
	for (size_t i = 0; i < count; i++) {
		t[i] = (tree_task){ p[i], n[i], chunks };
		chunks += xfer_tree_nchunks(n[i]);
	}
	if (xfer_gpu_hash_room(g, chunks, err) != 0) return -1;
	if (xfer_gpu_upload_tasks(g, stream, count * sizeof *t, err) != 0) return -1;
	unsigned nt = (unsigned)count;
	void *d_tasks = g->d_tasks, *d_hash = g->d_hash;
	void *params[] = { &d_tasks, &nt, &chunks, &d_hash };
	if (launch(xfer_hooks.gpu_direct_loads ? g_drv.dev[g->device].f_tree_d : g_drv.dev[g->device].f_tree, (chunks * 8 + TREE_BLOCK - 1) / TREE_BLOCK, TREE_BLOCK, stream, params,
		   "launching skein_tree_chunks", err) != 0)
		return -1;
	if (xfer_cuda_check(g->cu, g->cu->MemcpyAsync(g->h_hash, g->d_hash, chunks * 8, XFER_CUDA_D2H, stream),
			    "cudaMemcpyAsync (chunk hashes)", err) != 0 ||
	    xfer_cuda_check(g->cu, g->cu->StreamSynchronize(stream), "skein_tree_chunks", err) != 0)
		return -1;
	/* p and n are the caller's; t (the pinned table) was rewritten by no one */
	for (size_t i = 0; out && i < count; i++)
		out[i] = xfer_tree_top(g->h_hash + t[i].first, xfer_tree_nchunks(n[i]), n[i]);
	return 0;
}

void xfer_gpu_hashes_out(const xfer_gpu *g, const uint64_t *n, size_t count, uint64_t *out)
{
	uint64_t chunks = 0;
	for (size_t i = 0; i < count; i++) chunks += xfer_tree_nchunks(n[i]);
	if (chunks) memcpy(out, g->h_hash, chunks * sizeof *out);
}

int xfer_gpu_chunk_hashes(xfer_gpu *g, void *stream, const void *const *p, const uint64_t *n, size_t count,
			  uint64_t *out, xfer_err *err)
{
	if (xfer_gpu_tree_sums(g, stream, p, n, count, NULL, err) != 0) return -1;
	xfer_gpu_hashes_out(g, n, count, out);
	return 0;
}

int xfer_gpu_journal_launch(xfer_gpu *g, void *stream, unsigned ntasks, uint64_t npieces, uint64_t from, void *ent,
			    uint64_t cap, void *stat, int copy, xfer_err *err)
{
	void *d_tasks = g->d_tasks;
	void *params[] = { &d_tasks, &ntasks, &npieces, &from, &ent, &cap, &stat, &copy };
	uint64_t blocks = npieces - from, most = (uint64_t)(g->sms > 0 ? g->sms : 132) * 8;
	return launch(g_drv.dev[g->device].f_jcopy, blocks < most ? blocks : most, XFER_GPU_JOURNAL_BLOCK, stream, params,
		      "launching skein_journal_copy", err);
}

int xfer_gpu_copy_tree_launch(xfer_gpu *g, void *stream, unsigned ntasks, uint64_t nchunks, uint64_t from, void *ent,
			      uint64_t cap, void *stat, xfer_err *err)
{
	void *d_tasks = g->d_tasks, *d_hash = g->d_hash;
	void *params[] = { &d_tasks, &ntasks, &nchunks, &from, &ent, &cap, &stat, &d_hash };
	return launch(xfer_hooks.gpu_direct_loads ? g_drv.dev[g->device].f_ctree_d : g_drv.dev[g->device].f_ctree, ((nchunks - from) * 8 + TREE_BLOCK - 1) / TREE_BLOCK, TREE_BLOCK,
		      stream, params, "launching skein_copy_tree", err);
}

int xfer_gpu_undo_launch(xfer_gpu *g, void *stream, void *ent, uint64_t n, xfer_err *err)
{
	void *params[] = { &ent, &n };
	uint64_t blocks = (n + UNDO_BLOCK - 1) / UNDO_BLOCK, most = (uint64_t)(g->sms > 0 ? g->sms : 132) * 16;
	return launch(g_drv.dev[g->device].f_undo, blocks < most ? blocks : most, UNDO_BLOCK, stream, params,
		      "launching skein_journal_undo", err);
}
