/* transfer/core/xfer_manifest.c: dtypes, the manifest, buckets and the xxh3-128
 * checksum.
 *
 * The manifest is the one description both sides share: names, dtypes and
 * shapes must agree, and xfer_manifest_describe gives the text form used in
 * handshakes and disk indexes.  Buckets follow Miles's rule: manifest order,
 * at most bucket_bytes each, a larger tensor alone.  The checksum is xxh3-128
 * from Debian's libxxhash: 128 bits make an accidental match negligible over
 * billions of tensors, and it runs at memory speed (see the bench). */
#include "transfer/core/xfer_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "transfer/core/xfer_hash.h"


/* ---- dtypes ---- */

static const struct { const char *name; size_t size; } dtypes[XFER_DTYPE_COUNT] = {
	[XFER_BOOL] = { "bool", 1 }, [XFER_U8] = { "u8", 1 }, [XFER_I8] = { "i8", 1 },
	[XFER_I16] = { "i16", 2 }, [XFER_I32] = { "i32", 4 }, [XFER_I64] = { "i64", 8 },
	[XFER_F16] = { "f16", 2 }, [XFER_BF16] = { "bf16", 2 }, [XFER_F32] = { "f32", 4 },
	[XFER_F64] = { "f64", 8 }, [XFER_F8E4M3] = { "f8e4m3", 1 }, [XFER_F8E5M2] = { "f8e5m2", 1 },
};

size_t xfer_dtype_size(xfer_dtype dt)
{
	return (unsigned)dt < XFER_DTYPE_COUNT ? dtypes[dt].size : 0;
}

const char *xfer_dtype_name(xfer_dtype dt)
{
	return (unsigned)dt < XFER_DTYPE_COUNT ? dtypes[dt].name : "?";
}

int xfer_dtype_parse(const char *s, xfer_dtype *out)
{
	for (int i = 0; i < XFER_DTYPE_COUNT; i++)
		if (strcmp(s, dtypes[i].name) == 0) { *out = (xfer_dtype)i; return 0; }
	return -1;
}

/* ---- manifest ---- */

xfer_manifest *xfer_manifest_new(void)
{
	return calloc(1, sizeof(xfer_manifest));
}

void xfer_manifest_free(xfer_manifest **mp)
{
	if (!mp || !*mp) return;
	xfer_manifest *m = *mp;
	for (size_t i = 0; i < m->n; i++) free((char *)m->t[i].name);
	free(m->t);
	free(m);
	*mp = NULL;
}

static int name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > XFER_NAME_MAX) return 0;
	for (size_t i = 0; i < n; i++)
		if (!isgraph((unsigned char)s[i])) return 0;
	return 1;
}

int xfer_manifest_add(xfer_manifest *m, const char *name, xfer_dtype dt, int ndim,
		      const int64_t *shape, void *ptr, xfer_mem mem, xfer_err *err)
{
	if (!m || !name) return xfer_fail(err, XFER_EINVAL, "manifest_add: NULL argument");
	if (!name_ok(name))
		return xfer_fail(err, XFER_EINVAL, "tensor name \"%.64s\": 1..%d printable characters, no spaces",
				 name, XFER_NAME_MAX);
	if ((unsigned)dt >= XFER_DTYPE_COUNT)
		return xfer_fail(err, XFER_EINVAL, "tensor %s: unknown dtype %d", name, (int)dt);
	if (ndim < 0 || ndim > XFER_MAX_DIMS)
		return xfer_fail(err, XFER_EINVAL, "tensor %s: %d dimensions (0..%d)", name, ndim, XFER_MAX_DIMS);
	if (mem != XFER_MEM_HOST && mem != XFER_MEM_CUDA)
		return xfer_fail(err, XFER_EINVAL, "tensor %s: unknown memory kind %d", name, (int)mem);
	uint64_t elems = 1;
	for (int i = 0; i < ndim; i++) {
		if (shape[i] < 0) return xfer_fail(err, XFER_EINVAL, "tensor %s: negative dimension", name);
		if (shape[i] && elems > UINT64_MAX / (uint64_t)shape[i])
			return xfer_fail(err, XFER_EINVAL, "tensor %s: size overflows", name);
		elems *= (uint64_t)shape[i];
	}
	uint64_t esz = xfer_dtype_size(dt);
	if (elems > UINT64_MAX / esz || elems * esz > UINT64_MAX - m->bytes)
		return xfer_fail(err, XFER_EINVAL, "tensor %s: size overflows", name);
	uint64_t nbytes = elems * esz;
	if (nbytes && !ptr) return xfer_fail(err, XFER_EINVAL, "tensor %s: NULL pointer", name);
	if (xfer_manifest_find(m, name) >= 0)
		return xfer_fail(err, XFER_EINVAL, "tensor %s: name used twice", name);
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 64;
		xfer_tensor *t = realloc(m->t, cap * sizeof *t);
		if (!t) return xfer_fail(err, XFER_ENOMEM, "manifest: out of memory");
		m->t = t;
		m->cap = cap;
	}
	xfer_tensor *t = &m->t[m->n];
	memset(t, 0, sizeof *t);
	t->name = strdup(name);
	if (!t->name) return xfer_fail(err, XFER_ENOMEM, "manifest: out of memory");
	t->dtype = dt;
	t->ndim = ndim;
	for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
	t->nbytes = nbytes;
	t->ptr = ptr;
	t->mem = mem;
	m->n++;
	m->bytes += nbytes;
	return 0;
}

void xfer_manifest_set_device(xfer_manifest *m, int device)
{
	if (m && m->n) m->t[m->n - 1].device = device;
}

size_t xfer_manifest_count(const xfer_manifest *m) { return m ? m->n : 0; }
uint64_t xfer_manifest_bytes(const xfer_manifest *m) { return m ? m->bytes : 0; }

const xfer_tensor *xfer_manifest_tensor(const xfer_manifest *m, size_t i)
{
	return m && i < m->n ? &m->t[i] : NULL;
}

long xfer_manifest_find(const xfer_manifest *m, const char *name)
{
	for (size_t i = 0; i < m->n; i++)
		if (strcmp(m->t[i].name, name) == 0) return (long)i;
	return -1;
}

int xfer_shape_format(const xfer_tensor *t, char *out, size_t n)
{
	size_t k = 0;
	out[0] = 0;
	if (t->ndim == 0) return snprintf(out, n, "scalar") < 0 ? -1 : 0;
	for (int i = 0; i < t->ndim && k < n; i++) {
		int w = snprintf(out + k, n - k, "%s%lld", i ? "x" : "", (long long)t->shape[i]);
		if (w < 0) return -1;
		k += (size_t)w;
	}
	return 0;
}

int xfer_manifest_compare(const xfer_manifest *a, const xfer_manifest *b, xfer_err *err)
{
	char sa[160], sb[160];
	size_t n = a->n < b->n ? a->n : b->n;
	for (size_t i = 0; i < n; i++) {
		const xfer_tensor *x = &a->t[i], *y = &b->t[i];
		xfer_shape_format(x, sa, sizeof sa);
		xfer_shape_format(y, sb, sizeof sb);
		if (strcmp(x->name, y->name) != 0)
			return xfer_fail(err, XFER_EMISMATCH, "tensor %zu: name %s on one side, %s on the other",
					 i, x->name, y->name);
		if (x->dtype != y->dtype)
			return xfer_fail(err, XFER_EMISMATCH, "tensor %s: dtype %s on one side, %s on the other",
					 x->name, xfer_dtype_name(x->dtype), xfer_dtype_name(y->dtype));
		if (strcmp(sa, sb) != 0)
			return xfer_fail(err, XFER_EMISMATCH, "tensor %s: shape %s on one side, %s on the other",
					 x->name, sa, sb);
	}
	if (a->n != b->n)
		return xfer_fail(err, XFER_EMISMATCH, "%zu tensors on one side, %zu on the other", a->n, b->n);
	return 0;
}

uint64_t *xfer_manifest_offsets(const xfer_manifest *m)
{
	uint64_t *o = malloc((m->n + 1) * sizeof *o);
	if (!o) return NULL;
	o[0] = 0;
	for (size_t i = 0; i < m->n; i++) o[i + 1] = o[i] + m->t[i].nbytes;
	return o;
}

char *xfer_manifest_describe(const xfer_manifest *m, size_t *len)
{
	size_t cap = 64 + m->n * (XFER_NAME_MAX + 200), k = 0;
	char *s = malloc(cap), shape[160];
	if (!s) return NULL;
	for (size_t i = 0; i < m->n; i++) {
		const xfer_tensor *t = &m->t[i];
		xfer_shape_format(t, shape, sizeof shape);
		k += (size_t)snprintf(s + k, cap - k, "%s %s %s %llu\n", t->name, xfer_dtype_name(t->dtype),
				      shape, (unsigned long long)t->nbytes);
	}
	s[k] = 0;
	*len = k;
	return s;
}

/* Parses "d0xd1x..." or "scalar". */
static int parse_shape(const char *s, int *ndim, int64_t *shape)
{
	*ndim = 0;
	if (strcmp(s, "scalar") == 0) return 0;
	while (*s) {
		if (*ndim == XFER_MAX_DIMS || !isdigit((unsigned char)*s)) return -1;
		char *end;
		errno = 0;
		long long v = strtoll(s, &end, 10);
		if (errno || v < 0) return -1;
		shape[(*ndim)++] = v;
		if (*end == 'x') end++;
		else if (*end) return -1;
		s = end;
	}
	return 0;
}

xfer_manifest *xfer_manifest_parse(const char *text, size_t len, size_t max_tensors, xfer_err *err)
{
	xfer_manifest *m = xfer_manifest_new();
	char *copy = malloc(len + 1);
	if (!m || !copy) { xfer_fail(err, XFER_ENOMEM, "manifest: out of memory"); goto err; }
	memcpy(copy, text, len);
	copy[len] = 0;
	char *save = NULL;
	for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char name[XFER_NAME_MAX + 1], dt[16], shp[160];
		unsigned long long nb;
		int nd;
		int64_t shape[XFER_MAX_DIMS];
		xfer_dtype d;
		static char dummy;
		if (m->n >= max_tensors) {
			xfer_fail(err, XFER_EMISMATCH, "the manifest has more than %zu tensors", max_tensors);
			goto err;
		}
		if (sscanf(line, "%255s %15s %159s %llu", name, dt, shp, &nb) != 4 ||
		    xfer_dtype_parse(dt, &d) != 0 || parse_shape(shp, &nd, shape) != 0) {
			xfer_fail(err, XFER_EFORMAT, "manifest line \"%.80s\" is malformed", line);
			goto err;
		}
		if (xfer_manifest_add(m, name, d, nd, shape, &dummy, XFER_MEM_HOST, err) != 0) goto err;
		m->t[m->n - 1].ptr = NULL;
		if (m->t[m->n - 1].nbytes != nb) {
			xfer_fail(err, XFER_EFORMAT, "manifest line for %s: %llu bytes, shape says %llu",
				  name, nb, (unsigned long long)m->t[m->n - 1].nbytes);
			goto err;
		}
	}
	free(copy);
	return m;
err:
	free(copy);
	xfer_manifest_free(&m);
	return NULL;
}

/* ---- buckets ---- */

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

int xfer_buckets(const xfer_manifest *m, uint64_t bucket_bytes, xfer_bucket **out, size_t *n,
		 xfer_err *err)
{
	if (!bucket_bytes) bucket_bytes = XFER_DEFAULT_BUCKET_BYTES;
	xfer_bucket *b = calloc(m->n + 1, sizeof *b);
	if (!b) return xfer_fail(err, XFER_ENOMEM, "buckets: out of memory");
	size_t nb = 0;
	for (size_t i = 0; i < m->n; i++) {
		const xfer_tensor *t = &m->t[i];
		uint64_t es = xfer_dtype_size(t->dtype);
		if (t->nbytes > bucket_bytes) {
			b[nb++] = (xfer_bucket){ .first = i, .count = 1, .bytes = t->nbytes,
						 .packed_bytes = t->nbytes, .alone = 1 };
			continue;
		}
		xfer_bucket *c = nb ? &b[nb - 1] : NULL;
		uint64_t at = c ? align_up(c->packed_bytes, es) : 0;
		if (!c || c->alone || (c->count && at + t->nbytes > bucket_bytes)) {
			c = &b[nb++];
			*c = (xfer_bucket){ .first = i };
			at = 0;
		}
		c->count++;
		c->bytes += t->nbytes;
		c->packed_bytes = at + t->nbytes;
	}
	*out = b;
	*n = nb;
	return 0;
}

/* ---- checksum ---- */

xfer_sum xfer_checksum(const void *p, size_t n)
{
	XXH128_hash_t h = XXH3_128bits(p, n);
	return (xfer_sum){ h.low64, h.high64 };
}

int xfer_sum_equal(xfer_sum a, xfer_sum b) { return a.lo == b.lo && a.hi == b.hi; }

void xfer_sum_hex(xfer_sum s, char out[33])
{
	snprintf(out, 33, "%016llx%016llx", (unsigned long long)s.hi, (unsigned long long)s.lo);
}

int xfer_sum_parse(const char *hex, xfer_sum *out)
{
	char a[17], b[17];
	if (strlen(hex) != 32) return -1;
	for (int i = 0; i < 32; i++)
		if (!isxdigit((unsigned char)hex[i])) return -1;
	memcpy(a, hex, 16);
	memcpy(b, hex + 16, 16);
	a[16] = b[16] = 0;
	out->hi = strtoull(a, NULL, 16);
	out->lo = strtoull(b, NULL, 16);
	return 0;
}

const xfer_cuda_api *xfer_tensor_cuda(const xfer_tensor *t, xfer_err *err)
{
	char why[256];
	const xfer_cuda_api *cu = xfer_cuda(why, sizeof why);
	if (!cu) xfer_fail(err, XFER_EUNAVAIL, "tensor %s is in CUDA memory: %s", t->name, why);
	return cu;
}

int xfer_tensor_checksum(const xfer_tensor *t, void *stage, size_t stage_len, xfer_sum *out,
			 xfer_err *err)
{
	if (t->mem == XFER_MEM_HOST) {
		*out = xfer_checksum(t->ptr, t->nbytes);
		return 0;
	}
	const xfer_cuda_api *cu = xfer_tensor_cuda(t, err);
	if (!cu) return -1;
	XXH3_state_t *st = XXH3_createState();
	if (!st) return xfer_fail(err, XFER_ENOMEM, "checksum: out of memory");
	XXH3_128bits_reset(st);
	for (uint64_t off = 0; off < t->nbytes; off += stage_len) {
		size_t k = t->nbytes - off < stage_len ? (size_t)(t->nbytes - off) : stage_len;
		if (xfer_cuda_copy(cu, stage, XFER_MEM_HOST, (const char *)t->ptr + off, XFER_MEM_CUDA, k,
				   err) != 0) {
			XXH3_freeState(st);
			return -1;
		}
		XXH3_128bits_update(st, stage, k);
	}
	XXH128_hash_t h = XXH3_128bits_digest(st);
	XXH3_freeState(st);
	*out = (xfer_sum){ h.low64, h.high64 };
	return 0;
}
