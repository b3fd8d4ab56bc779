/* transfer/tools/xfer_sim.h: a synthetic model for the stand-in trainer and engine
 * and the benchmark (not part of the transfer API).
 *
 * M bytes of bf16 weights in K tensors of realistic sizes: a few large
 * embedding-like matrices, many projection matrices, small norm vectors; values
 * look like trained weights (|w| around 2^-6..2^-9).  Version v is a pure
 * function of (seed, layout, changed fraction, v): step() changes about that
 * fraction of the elements, scattered, by one or two units in the last place,
 * as Adam at a small learning rate does under bf16 rounding.  So an engine
 * can recompute what version v must be and compare bit for bit. */
#ifndef XFER_SIM_H
#define XFER_SIM_H

#include "transfer/include/skein_xfer.h"

typedef struct {
	size_t n;
	uint16_t **w;       /* tensors (bf16 bits) */
	uint64_t *elems;
	uint64_t seed;
	double changed;
	uint64_t version;   /* the version the weights hold */
	xfer_manifest *m;
	/* --device cuda: the same tensors in one device allocation */
	void *dev;
	xfer_manifest *dm;  /* the tensors at dev (XFER_MEM_CUDA) */
} xfer_sim_model;

/* Lays out bytes over tensors (tensors >= 1) and fills version 1.  mem NULL:
 * allocate; else the caller's buffer of `bytes` is used (and filled). */
int xfer_sim_model_init(xfer_sim_model *s, uint64_t bytes, size_t tensors, uint64_t seed, double changed,
			xfer_err *err);
void xfer_sim_model_free(xfer_sim_model *s);
/* Moves the weights to version v (> s->version) by applying the steps. */
void xfer_sim_model_advance(xfer_sim_model *s, uint64_t v);
/* Overwrites every tensor with a marker pattern (an engine before v1). */
void xfer_sim_model_poison(xfer_sim_model *s);
/* Index of the first tensor that differs, or -1 when a and b are equal. */
long xfer_sim_model_diff(const xfer_sim_model *a, const xfer_sim_model *b);
/* --device cuda: one allocation on CUDA device `device` holding every
 * tensor (256-byte aligned), described by s->dm, filled from the host
 * copy.  Upload and download copy all of it one way. */
int xfer_sim_model_to_device(xfer_sim_model *s, int device, xfer_err *err);
int xfer_sim_model_upload(xfer_sim_model *s, xfer_err *err);
int xfer_sim_model_download(xfer_sim_model *s, xfer_err *err);
/* The manifest to open an endpoint with: dm when on the device, else m. */
const xfer_manifest *xfer_sim_model_manifest(const xfer_sim_model *s);
/* Parses "123", "4k", "16M", "4G" (powers of 1024). */
int xfer_parse_bytes(const char *s, uint64_t *out);

#endif
