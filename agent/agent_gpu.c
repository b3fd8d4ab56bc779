/* agent/agent_gpu: counts GPUs with NVML or the CUDA runtime, loaded with
 * dlopen so skeind builds and runs on machines without them. */
#include "agent/agent.h"

#include <dlfcn.h>
#include <stdio.h>

static int try_nvml(char *source, size_t cap)
{
	void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h) return -1;
	int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
	int (*count)(unsigned *) = (int (*)(unsigned *))dlsym(h, "nvmlDeviceGetCount_v2");
	int (*shutdown)(void) = (int (*)(void))dlsym(h, "nvmlShutdown");
	int n = -1;
	unsigned c = 0;
	if (init && count && init() == 0) {
		if (count(&c) == 0) n = (int)c;
		if (shutdown) shutdown();
	}
	dlclose(h);
	if (n >= 0) snprintf(source, cap, "nvml");
	return n;
}

static int try_cuda(char *source, size_t cap)
{
	static const char *const libs[] = { "libcudart.so", "libcudart.so.13", "libcudart.so.12" };
	for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
		void *h = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
		if (!h) continue;
		int (*count)(int *) = (int (*)(int *))dlsym(h, "cudaGetDeviceCount");
		int c = 0, n = -1;
		if (count && count(&c) == 0) n = c;
		dlclose(h);
		if (n >= 0) {
			snprintf(source, cap, "cuda");
			return n;
		}
	}
	return -1;
}

int agent_gpu_count(char *source, size_t cap)
{
	int n = try_nvml(source, cap);
	if (n >= 0) return n;
	n = try_cuda(source, cap);
	if (n >= 0) return n;
	snprintf(source, cap, "none: no NVML or CUDA runtime answered");
	return 0;
}
