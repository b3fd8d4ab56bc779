/* tests/fakecuda/fake_cudart.c: a stand-in CUDA runtime and driver for
 * machines without a GPU, so that the colocated path's coordination (the
 * handoff through the agents, the engine's copy, verdicts, undo) runs in
 * `make test` (tests/agent/colocated_test.sh).  libskein dlopens it through
 * SKEIN_CUDART_LIB and SKEIN_CUDA_LIB (transfer/gpu/xfer_cuda.c).
 *
 * "Device memory" is host memory in a shared-memory file per allocation
 * (/dev/shm/skein-fakecu-<pid>-<n>); an IPC handle is that file's name, so
 * another process maps the same bytes, as cudaIpcOpenMemHandle does.  The
 * kernels' driver calls are absent (libskein then checks on the CPU).  Only
 * what libskein calls is here; every copy is a memcpy.  Not thread-safe
 * beyond one mutex over the table of mappings.  SKEIN_FAKE_CUDA_LOG=FILE:
 * every IPC handle opened or closed appends a line "ipc-open NAME PID" or
 * "ipc-close NAME PID" there (tests count the opens across versions). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum { MAPS_MAX = 1024, ERR = 1 };

typedef struct {
	char *p;
	size_t n;
	char name[64];
	int owner; /* cudaMalloc'd here (unlinked at cudaFree), else opened from a handle */
} fk_map;

static fk_map g_maps[MAPS_MAX];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned g_seq;

static fk_map *find(const void *p)
{
	for (int i = 0; i < MAPS_MAX; i++)
		if (g_maps[i].p && (const char *)p >= g_maps[i].p && (const char *)p < g_maps[i].p + g_maps[i].n)
			return &g_maps[i];
	return NULL;
}

static int add(char *p, size_t n, const char *name, int owner)
{
	for (int i = 0; i < MAPS_MAX; i++)
		if (!g_maps[i].p) {
			g_maps[i] = (fk_map){ p, n, "", owner };
			snprintf(g_maps[i].name, sizeof g_maps[i].name, "%s", name);
			return 0;
		}
	return ERR;
}

static int map_file(const char *name, size_t n, int create, void **out)
{
	int fd = shm_open(name, create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600);
	if (fd < 0) return ERR;
	struct stat st;
	if ((create && ftruncate(fd, (off_t)n) != 0) || fstat(fd, &st) != 0) {
		close(fd);
		return ERR;
	}
	void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) return ERR;
	pthread_mutex_lock(&g_mu);
	int rc = add(p, (size_t)st.st_size, name, create);
	pthread_mutex_unlock(&g_mu);
	if (rc) munmap(p, (size_t)st.st_size);
	else *out = p;
	return rc;
}

int cudaGetDeviceCount(int *n) { *n = 1; return 0; }
int cudaSetDevice(int d) { return d == 0 ? 0 : ERR; }
const char *cudaGetErrorString(int rc) { return rc ? "fake CUDA error" : "no error"; }
int cudaDeviceSynchronize(void) { return 0; }
int cudaStreamCreate(void **s) { *s = (void *)1; return 0; }
int cudaStreamDestroy(void *s) { (void)s; return 0; }
int cudaStreamSynchronize(void *s) { (void)s; return 0; }
int cudaStreamQuery(void *s) { (void)s; return 0; }
int cudaMallocHost(void **p, size_t n) { return (*p = malloc(n ? n : 1)) ? 0 : ERR; }
int cudaFreeHost(void *p) { free(p); return 0; }
int cudaMemcpy(void *d, const void *s, size_t n, int kind) { (void)kind; memmove(d, s, n); return 0; }
int cudaMemcpyAsync(void *d, const void *s, size_t n, int kind, void *st) { (void)kind; (void)st; memmove(d, s, n); return 0; }
int cudaMemset(void *p, int v, size_t n) { memset(p, v, n); return 0; }

int cudaMalloc(void **p, size_t n)
{
	char name[64];
	pthread_mutex_lock(&g_mu);
	unsigned k = g_seq++;
	pthread_mutex_unlock(&g_mu);
	snprintf(name, sizeof name, "/skein-fakecu-%d-%u", (int)getpid(), k);
	return map_file(name, n ? n : 1, 1, p);
}

static int unmap(void *p, int owner)
{
	pthread_mutex_lock(&g_mu);
	fk_map *m = find(p);
	if (!m || m->p != p || m->owner != owner) {
		pthread_mutex_unlock(&g_mu);
		return ERR;
	}
	fk_map c = *m;
	memset(m, 0, sizeof *m);
	pthread_mutex_unlock(&g_mu);
	if (owner) shm_unlink(c.name);
	munmap(c.p, c.n);
	return 0;
}

int cudaFree(void *p) { return p ? unmap(p, 1) : 0; }

typedef struct { char b[64]; } fk_handle;

int cudaIpcGetMemHandle(fk_handle *h, void *p)
{
	pthread_mutex_lock(&g_mu);
	fk_map *m = find(p);
	int ok = m && m->owner && m->p == p;
	if (ok) {
		memset(h, 0, sizeof *h);
		snprintf(h->b, sizeof h->b, "%s", m->name);
	}
	pthread_mutex_unlock(&g_mu);
	return ok ? 0 : ERR;
}

static void ipc_log(const char *what, const char *name)
{
	const char *path = getenv("SKEIN_FAKE_CUDA_LOG");
	if (!path || !*path) return;
	FILE *f = fopen(path, "a");
	if (!f) return;
	fprintf(f, "%s %s %d\n", what, name, (int)getpid());
	fclose(f);
}

int cudaIpcOpenMemHandle(void **p, fk_handle h, unsigned flags)
{
	(void)flags;
	if (memchr(h.b, 0, sizeof h.b) == NULL || strncmp(h.b, "/skein-fakecu-", 14) != 0) return ERR;
	int rc = map_file(h.b, 0, 0, p);
	if (rc == 0) ipc_log("ipc-open", h.b);
	return rc;
}

int cudaIpcCloseMemHandle(void *p)
{
	char name[64] = "";
	pthread_mutex_lock(&g_mu);
	fk_map *m = find(p);
	if (m) snprintf(name, sizeof name, "%s", m->name);
	pthread_mutex_unlock(&g_mu);
	int rc = unmap(p, 0);
	if (rc == 0) ipc_log("ipc-close", name);
	return rc;
}

/* the driver's two calls */
int cuInit(unsigned f) { (void)f; return 0; }

int cuMemGetAddressRange_v2(unsigned long long *base, size_t *size, unsigned long long ptr)
{
	pthread_mutex_lock(&g_mu);
	fk_map *m = find((void *)(uintptr_t)ptr);
	if (m) {
		*base = (unsigned long long)(uintptr_t)m->p;
		*size = m->n;
	}
	pthread_mutex_unlock(&g_mu);
	return m ? 0 : ERR;
}
