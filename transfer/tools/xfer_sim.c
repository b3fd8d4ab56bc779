/* transfer/tools/xfer_sim.c: the synthetic model behind the stand-in trainer and
 * engine and the benchmark; see xfer_sim.h.  Its generator is a local
 * splitmix64 so that libskein needs nothing from common/. */
#include "transfer/tools/xfer_sim.h"

#include "transfer/core/xfer_int.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t mix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double unit(uint64_t *x) { return (double)(mix(x) >> 11) / 9007199254740992.0; }

int xfer_parse_bytes(const char *s, uint64_t *out)
{
	char *end;
	double v = strtod(s, &end);
	if (end == s || v < 0) return -1;
	double mul = 1;
	switch (toupper((unsigned char)*end)) {
	case 0: break;
	case 'K': mul = 1024.0; break;
	case 'M': mul = 1048576.0; break;
	case 'G': mul = 1073741824.0; break;
	case 'T': mul = 1099511627776.0; break;
	default: return -1;
	}
	if (*end && end[1] && !(toupper((unsigned char)end[1]) == 'I' || toupper((unsigned char)end[1]) == 'B'))
		return -1;
	*out = (uint64_t)(v * mul);
	return 0;
}

/* Weights like a trained model's: sign, exponent 2^-9..2^-6, any mantissa. */
static void fill(uint16_t *w, uint64_t n, uint64_t *r)
{
	uint64_t i = 0, bits = 0;
	int left = 0;
	for (; i < n; i++) {
		if (left == 0) { bits = mix(r); left = 6; }
		uint16_t sign = (uint16_t)(bits & 1), exp = (uint16_t)(118 + ((bits >> 1) & 3)), man = (uint16_t)((bits >> 3) & 0x7f);
		w[i] = (uint16_t)(sign << 15 | exp << 7 | man);
		bits >>= 10;
		left--;
	}
}

int xfer_sim_model_init(xfer_sim_model *s, uint64_t bytes, size_t tensors, uint64_t seed, double changed,
			xfer_err *err)
{
	memset(s, 0, sizeof *s);
	if (tensors < 1) tensors = 1;
	uint64_t total = bytes / 2; /* bf16 elements */
	if (total < tensors) tensors = total ? (size_t)total : 1;
	s->seed = seed;
	s->changed = changed;
	s->n = tensors;
	s->w = calloc(tensors, sizeof *s->w);
	s->elems = calloc(tensors, sizeof *s->elems);
	s->m = xfer_manifest_new();
	double *share = calloc(tensors, sizeof *share), sum = 0;
	if (!s->w || !s->elems || !s->m || !share) {
		free(share);
		return xfer_fail(err, XFER_ENOMEM, "sim model: out of memory");
	}
	uint64_t r = seed ^ 0x5eed;
	/* Sizes: every 8th tensor a norm vector (tiny), two embedding-like
	 * tensors 16x a projection, the rest log-uniform over 4x. */
	for (size_t i = 0; i < tensors; i++) {
		double w = i % 8 == 7 ? 0.002 : exp2(2 * unit(&r));
		if (i < 2 && tensors > 16) w = 16;
		share[i] = w;
		sum += w;
	}
	uint64_t given = 0;
	for (size_t i = 0; i < tensors; i++) {
		uint64_t e = i + 1 == tensors ? total - given : (uint64_t)(total * (share[i] / sum));
		if (e == 0 && total - given > tensors - i) e = 1;
		if (given + e > total) e = total - given;
		s->elems[i] = e;
		given += e;
	}
	free(share);
	for (size_t i = 0; i < tensors; i++) {
		s->w[i] = malloc(s->elems[i] * 2 + 2);
		if (!s->w[i]) return xfer_fail(err, XFER_ENOMEM, "sim model: out of memory for %llu bytes",
						(unsigned long long)bytes);
		char name[96];
		static const char *const kinds[] = { "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
						     "down_proj", "norm" };
		if (i < 2 && tensors > 16) snprintf(name, sizeof name, "model.%s.weight", i ? "lm_head" : "embed_tokens");
		else snprintf(name, sizeof name, "model.layers.%zu.%s.weight", i / 8, kinds[i % 8]);
		int64_t shape[1] = { (int64_t)s->elems[i] };
		if (xfer_manifest_add(s->m, name, XFER_BF16, 1, shape, s->w[i], XFER_MEM_HOST, err) != 0) return -1;
		uint64_t tr = seed * 31 + i;
		fill(s->w[i], s->elems[i], &tr);
	}
	s->version = 1;
	return 0;
}

/* One copy per tensor between the host copy and the device allocation. */
static int copy_all(xfer_sim_model *s, int to_device, xfer_err *err)
{
	const xfer_cuda_api *cu = xfer_cuda(NULL, 0);
	if (!s->dev || !cu) return xfer_fail(err, XFER_EINVAL, "sim model: not on a device");
	for (size_t i = 0; i < s->n; i++) {
		const xfer_tensor *t = xfer_manifest_tensor(s->dm, i);
		if (!t->nbytes) continue;
		if ((to_device ? xfer_cuda_copy(cu, t->ptr, XFER_MEM_CUDA, s->w[i], XFER_MEM_HOST, t->nbytes, err)
			       : xfer_cuda_copy(cu, s->w[i], XFER_MEM_HOST, t->ptr, XFER_MEM_CUDA, t->nbytes, err)) != 0)
			return -1;
	}
	return 0;
}

int xfer_sim_model_to_device(xfer_sim_model *s, int device, xfer_err *err)
{
	char why[256];
	const xfer_cuda_api *cu = xfer_cuda(why, sizeof why);
	if (!cu) return xfer_fail(err, XFER_EUNAVAIL, "--device cuda: %s", why);
	uint64_t total = 0;
	for (size_t i = 0; i < s->n; i++) total += (s->elems[i] * 2 + 255) & ~(uint64_t)255;
	if (xfer_cuda_check(cu, cu->SetDevice(device), "cudaSetDevice", err) != 0 ||
	    xfer_cuda_check(cu, cu->Malloc(&s->dev, total ? total : 256), "cudaMalloc", err) != 0)
		return -1;
	if (!(s->dm = xfer_manifest_new())) return xfer_fail(err, XFER_ENOMEM, "sim model: out of memory");
	uint64_t off = 0;
	for (size_t i = 0; i < s->n; i++) {
		const xfer_tensor *t = xfer_manifest_tensor(s->m, i);
		int64_t shape[1] = { (int64_t)s->elems[i] };
		if (xfer_manifest_add(s->dm, t->name, XFER_BF16, 1, shape, (char *)s->dev + off, XFER_MEM_CUDA, err) != 0)
			return -1;
		xfer_manifest_set_device(s->dm, device);
		off += (s->elems[i] * 2 + 255) & ~(uint64_t)255;
	}
	return copy_all(s, 1, err);
}

int xfer_sim_model_upload(xfer_sim_model *s, xfer_err *err) { return copy_all(s, 1, err); }
int xfer_sim_model_download(xfer_sim_model *s, xfer_err *err) { return copy_all(s, 0, err); }

const xfer_manifest *xfer_sim_model_manifest(const xfer_sim_model *s)
{
	return s->dm ? s->dm : s->m;
}

void xfer_sim_model_free(xfer_sim_model *s)
{
	if (s->dev) xfer_cuda(NULL, 0)->Free(s->dev);
	xfer_manifest_free(&s->dm);
	for (size_t i = 0; s->w && i < s->n; i++) free(s->w[i]);
	free(s->w);
	free(s->elems);
	xfer_manifest_free(&s->m);
	memset(s, 0, sizeof *s);
}

/* One step: about `changed` of the elements move by one or two ulps. */
static void step(xfer_sim_model *s, uint64_t v)
{
	for (size_t i = 0; i < s->n; i++) {
		uint64_t r = s->seed ^ (v * 0x9e3779b97f4a7c15ull) ^ (i * 0xd1b54a32d192ed03ull);
		uint64_t n = s->elems[i];
		if (!n) continue;
		if (s->changed >= 1.0) {
			for (uint64_t e = 0; e < n; e++) s->w[i][e] = (uint16_t)(s->w[i][e] + 1);
			continue;
		}
		uint64_t k = (uint64_t)(n * s->changed + unit(&r));
		for (uint64_t c = 0; c < k; c++) {
			uint64_t x = mix(&r);
			uint64_t e = (uint64_t)(((unsigned __int128)x * n) >> 64);
			s->w[i][e] = (uint16_t)(s->w[i][e] + ((x & 1) ? 1 : 0xffff) * ((x & 6) ? 1 : 2));
		}
	}
}

void xfer_sim_model_advance(xfer_sim_model *s, uint64_t v)
{
	for (uint64_t u = s->version + 1; u <= v; u++) step(s, u);
	if (v > s->version) s->version = v;
}

void xfer_sim_model_poison(xfer_sim_model *s)
{
	for (size_t i = 0; i < s->n; i++) memset(s->w[i], 0xA5, s->elems[i] * 2);
	s->version = 0;
}

long xfer_sim_model_diff(const xfer_sim_model *a, const xfer_sim_model *b)
{
	if (a->n != b->n) return 0;
	for (size_t i = 0; i < a->n; i++)
		if (a->elems[i] != b->elems[i] || memcmp(a->w[i], b->w[i], a->elems[i] * 2) != 0) return (long)i;
	return -1;
}
