/* tests/fuzz/fuzz_disk_index: the disk-delta index file
 * (transfer/paths/xfer_disk.c), which a receiver reads from a shared folder.
 *
 * The text is parsed as it comes, and again with a correct "end <xxh3>"
 * line appended, so mutations reach the line parser instead of stopping at
 * the checksum.  An index that parses keeps its promises (tensors inside
 * the data, counts the text can hold) and formats back to the same index. */
#include "tests/fuzz/fuzz.h"

#include "transfer/core/xfer_hash.h"
#include "transfer/core/xfer_int.h"

static void check(const char *text, size_t len, uint64_t v)
{
	xfer_disk_index x, y;
	xfer_err err;
	if (xfer_disk_index_parse(text, len, v, "index", &x, &err) != 0) {
		FUZZ_CHECK(x.t == NULL && memchr(err.msg, 0, sizeof err.msg));
		return;
	}
	FUZZ_CHECK(x.version == v && x.n <= len / 32);
	for (size_t i = 0; i < x.n; i++)
		FUZZ_CHECK(x.t[i].offset + x.t[i].stored >= x.t[i].offset &&
			   x.t[i].offset + x.t[i].stored <= x.data_bytes);
	size_t flen;
	char *f = xfer_disk_index_format(&x, &flen);
	FUZZ_CHECK(f);
	FUZZ_CHECK(xfer_disk_index_parse(f, flen, v, "index", &y, &err) == 0);
	FUZZ_CHECK(x.chain == y.chain && x.version == y.version && x.base == y.base &&
		   x.data_bytes == y.data_bytes && x.full == y.full && x.zstd == y.zstd && x.n == y.n);
	FUZZ_CHECK(x.full || x.enc == y.enc);
	for (size_t i = 0; i < x.n; i++) {
		const xfer_disk_tensor *a = &x.t[i], *b = &y.t[i];
		FUZZ_CHECK(!strcmp(a->name, b->name) && !strcmp(a->dtype, b->dtype) && !strcmp(a->shape, b->shape));
		FUZZ_CHECK(a->nbytes == b->nbytes && a->offset == b->offset && a->stored == b->stored &&
			   a->changed == b->changed && a->stored_sum == b->stored_sum && xfer_sum_equal(a->sum, b->sum));
	}
	free(f);
	xfer_disk_index_free(&x);
	xfer_disk_index_free(&y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	/* the version the receiver looks for: the one the text names, else 1 */
	uint64_t v = 1;
	char *z = fuzz_strdup(data, size), *p = strstr(z, "\nversion ");
	if (p) v = strtoull(p + 9, NULL, 10);
	free(z);
	check(text, size, v);

	char *t = malloc(size + 32);
	if (!t) abort();
	memcpy(t, data, size);
	size_t n = size;
	if (n && t[n - 1] != '\n') t[n++] = '\n';
	n += (size_t)snprintf(t + n, 32, "end %016llx\n", (unsigned long long)XXH3_64bits(t, n));
	check(t, n, v);
	free(t);
	return 0;
}
