/* transfer/tools/xfer_engine_sim.c: skein-engine-sim, a stand-in rollout engine.
 *
 * Registers buffers (host, or --device cuda: GPU 0, read back to compare)
 * for the same layout as skein-trainer-sim (same --bytes,
 * --tensors, --seed), receives versions through libskein on --path until it
 * holds version --steps, and after each one recomputes what the trainer must
 * have published and compares bit for bit.  Exit 0 when every version
 * matched; 1 on a transfer error; 4 on a mismatch.
 *
 * Inside a job (SKEIN_JOB set) the endpoint comes from the agent's
 * environment and it receives only committed versions (a restarted engine
 * catches up first); after an abort it says so and compares the version it
 * is back on: "engine: v7 aborted (<reason>): back on v6, verified bit for
 * bit".  Versions the trainer skipped are fine (an aborted one never
 * commits); the comparison recomputes the committed version's bytes. */
#include "transfer/core/xfer_int.h"
#include "transfer/tools/xfer_sim_cli.h"

/* 0 when mine holds version v bit for bit (v 0: nothing yet); else prints
 * the mismatch.  On a device its bytes are read back first. */
static uint64_t ref_bytes;  /* the reference model's --bytes and --tensors */
static size_t ref_tensors;

static int compare(xfer_sim_model *mine, xfer_sim_model *ref, uint64_t v)
{
	if (v == 0) return 0;
	xfer_err e = { 0 };
	if (mine->dev && xfer_sim_model_download(mine, &e) != 0) {
		printf("engine: v%llu cannot be read back from the device: %s\n", (unsigned long long)v, e.msg);
		return -1;
	}
	/* the reference is made at the first check, not at start: a restarted
	 * engine asks its agent for the latest version first (readiness counts
	 * from the process start) */
	if (!ref->m && xfer_sim_model_init(ref, ref_bytes, ref_tensors, mine->seed, mine->changed, &e) != 0) {
		printf("engine: cannot make the reference model: %s\n", e.msg);
		return -1;
	}
	xfer_sim_model_advance(ref, v);
	long bad = xfer_sim_model_diff(ref, mine);
	if (bad < 0) return 0;
	printf("engine: v%llu MISMATCH in tensor %s\n", (unsigned long long)v,
	       xfer_manifest_tensor(mine->m, (size_t)bad)->name);
	return -1;
}

/* After an aborted first version: still the initial weights (the poison
 * xfer_sim_model_poison wrote)? */
static int initial_intact(xfer_sim_model *mine)
{
	xfer_err e = { 0 };
	if (mine->dev && xfer_sim_model_download(mine, &e) != 0) return 0;
	for (size_t i = 0; i < mine->n; i++)
		for (uint64_t k = 0; k < mine->elems[i] * 2; k++)
			if (((const unsigned char *)mine->w[i])[k] != 0xA5) return 0;
	return 1;
}

int main(int argc, char **argv)
{
	sim_opts o;
	xfer_sim_model mine, ref;
	xfer_config c;
	xfer_endpoint *ep = NULL;
	xfer_err e = { 0 };
	int rc = 1;
	memset(&mine, 0, sizeof mine);
	memset(&ref, 0, sizeof ref);
	if (sim_parse(argc, argv, &o, "the engine: receives and verifies versions up to S") != 0) return 2;
	ref_bytes = o.bytes;
	ref_tensors = o.tensors;
	if (xfer_sim_model_init(&mine, o.bytes, o.tensors, o.seed, o.changed, &e) != 0) goto err;
	xfer_sim_model_poison(&mine);
	if (o.cuda && xfer_sim_model_to_device(&mine, 0, &e) != 0) goto err;
	if (sim_config(&o, &c, XFER_RECEIVER, "engine") != 0) goto out;
	xfer_hooks.crash_receiving_version = o.crash_during;
	xfer_hooks.stall_file = o.stall_file;
	xfer_hooks.stall_ms = 1500;
	if (xfer_open(&ep, &c, xfer_sim_model_manifest(&mine), &e) != 0) goto err;
	if (o.port_file) {
		FILE *f = fopen(o.port_file, "w");
		if (!f || fprintf(f, "%d\n", xfer_endpoint_port(ep)) < 0 || fclose(f) != 0) {
			fprintf(stderr, "engine: cannot write %s\n", o.port_file);
			goto out;
		}
	}
	printf("engine: ready on %s%s%s\n", xfer_endpoint_path(ep), *xfer_endpoint_note(ep) ? ": " : "",
	       xfer_endpoint_note(ep));
	fflush(stdout);
	for (uint64_t have = 0; have < (uint64_t)o.steps;) {
		if (xfer_receive(ep, o.wait_ms, &have, &e) != 0) {
			if (o.in_job && e.code == XFER_ENOVERSION) continue; /* nothing committed yet: keep waiting */
			if (!o.in_job || e.code != XFER_EABORTED) goto err;
			xfer_update_stats u = xfer_endpoint_update(ep);
			uint64_t back = xfer_endpoint_stats(ep).version;
			if (compare(&mine, &ref, back) != 0) {
				rc = 4;
				goto out;
			}
			if (back == 0)
				printf("engine: v%llu aborted (%s): back on v0, its initial weights %s\n",
				       (unsigned long long)u.version, u.reason,
				       initial_intact(&mine) ? "intact bit for bit" : "NOT intact");
			else
				printf("engine: v%llu aborted (%s): back on v%llu, verified bit for bit\n",
				       (unsigned long long)u.version, u.reason, (unsigned long long)back);
			fflush(stdout);
			continue;
		}
		xfer_stats st = xfer_endpoint_stats(ep);
		if (compare(&mine, &ref, have) != 0) {
			rc = 4;
			goto out;
		}
		printf("engine: v%llu verified bit for bit (%zu tensors, %llu bytes read in %.3f s)\n",
		       (unsigned long long)have, mine.n, (unsigned long long)st.bytes_moved, st.seconds);
		fflush(stdout);
	}
	rc = 0;
	goto out;
err:
	fprintf(stderr, "engine: error: %s (%s)\n", e.msg, xfer_code_name(e.code));
out:
	xfer_close(&ep);
	xfer_sim_model_free(&mine);
	xfer_sim_model_free(&ref);
	return rc;
}
