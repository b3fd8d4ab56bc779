/* transfer/tools/xfer_trainer_sim.c: skein-trainer-sim, a stand-in trainer rank.
 *
 * Holds --bytes of bf16-like weights in --tensors tensors (xfer_sim.h; with
 * --device cuda on GPU 0, copied there after each step), and
 * for each of --steps versions changes about --changed of the elements
 * (scattered, a unit or two in the last place) and publishes the version
 * through libskein on --path.  One line per version on stdout; exit 0 when
 * all went out, 1 with the library's message when one did not.
 *
 * Inside a job (SKEIN_JOB set) the endpoint comes from the agent's
 * environment and every version is a coordinated update: one line per
 * verdict, "trainer: v7 committed: update_weights_time=..." or "trainer: v7
 * aborted: <the head's reason>", and an aborted version is no reason to
 * stop (exit 1 only on other errors).  --first-version V starts at V (the
 * model is a function of the version, so a restarted trainer that resumes
 * after the job's newest version publishes what it would have). */
#include "transfer/core/xfer_int.h"
#include "transfer/tools/xfer_sim_cli.h"

#include <time.h>

int main(int argc, char **argv)
{
	sim_opts o;
	xfer_sim_model s;
	xfer_config c;
	xfer_endpoint *ep = NULL;
	xfer_err e = { 0 };
	if (sim_parse(argc, argv, &o, "the trainer: publishes versions 1..S") != 0) return 2;
	if (xfer_sim_model_init(&s, o.bytes, o.tensors, o.seed, o.changed, &e) != 0) goto err;
	if (o.cuda && xfer_sim_model_to_device(&s, 0, &e) != 0) goto err;
	if (sim_config(&o, &c, XFER_SENDER, "trainer") != 0) {
		xfer_sim_model_free(&s);
		return 1;
	}
	if (xfer_open(&ep, &c, xfer_sim_model_manifest(&s), &e) != 0) goto err;
	if (*xfer_endpoint_note(ep)) printf("trainer: %s\n", xfer_endpoint_note(ep));
	/* a test flag that cannot act must say so, not pass silently: these
	 * paths read xfer_hooks.corrupt_version (issue 27) */
	static const char *const corrupts[] = { "disk-delta", "colocated", "broadcast", "broadcast_packed",
						"p2p",        "p2p-tcp",   "p2p-ucx" };
	int acts = 0;
	for (size_t i = 0; i < sizeof corrupts / sizeof *corrupts; i++)
		acts |= !strcmp(xfer_endpoint_path(ep), corrupts[i]);
	if (o.corrupt_version && !acts) {
		fprintf(stderr, "trainer: error: --corrupt-version cannot act on path %s\n", xfer_endpoint_path(ep));
		xfer_close(&ep);
		xfer_sim_model_free(&s);
		return 2;
	}
	xfer_hooks.corrupt_version = o.corrupt_version;
	/* a restarted trainer goes on above the job's newest version (the model
	 * is a function of the version, so it picks up where the job is);
	 * --first-version says where outright */
	uint64_t newest = 0;
	if (o.in_job && o.first_version <= 0 && xfer_job_newest(ep, &newest, &e) != 0) goto err;
	if (newest) printf("trainer: the job's newest version is v%llu: going on from v%llu\n",
			   (unsigned long long)newest, (unsigned long long)newest + 1);
	int first = o.first_version > 0 ? o.first_version : (int)newest + 1;
	for (int v = first; v <= o.steps; v++) {
		if (v > first && o.interval_ms > 0) {
			struct timespec ts = { o.interval_ms / 1000, (long)(o.interval_ms % 1000) * 1000000L };
			nanosleep(&ts, NULL);
		}
		xfer_sim_model_advance(&s, (uint64_t)v);
		if (o.cuda && xfer_sim_model_upload(&s, &e) != 0) goto err;
		if (o.crash_after == v) xfer_hooks.die_after_bucket = 1;
		if (o.in_job) {
			xfer_update_stats u;
			if (xfer_publish(ep, (uint64_t)v, &u, &e) != 0) {
				if (e.code != XFER_EABORTED) goto err;
				printf("trainer: v%d aborted: %s\n", v, xfer_endpoint_update(ep).reason);
			} else {
				printf("trainer: v%d committed: update_weights_time=%.3f implementation_time=%.3f "
				       "wire_bytes=%llu density=%.4f participants=%u dropped=%u\n",
				       v, u.update_seconds, u.implementation_seconds, (unsigned long long)u.wire_bytes,
				       u.density, u.participants, u.dropped);
			}
			fflush(stdout);
			continue;
		}
		if (o.ticket_job && xfer_p2p_ticket(ep, o.ticket_job, (uint64_t)v, o.ticket_nonce, &e) != 0) goto err;
		if (xfer_send(ep, (uint64_t)v, &e) != 0) goto err;
		xfer_stats st = xfer_endpoint_stats(ep);
		printf("trainer: published v%d on %s: %llu bytes moved in %.3f s\n", v, xfer_endpoint_path(ep),
		       (unsigned long long)st.bytes_moved, st.seconds);
		fflush(stdout);
	}
	xfer_close(&ep);
	xfer_sim_model_free(&s);
	return 0;
err:
	fprintf(stderr, "trainer: error: %s (%s)\n", e.msg, xfer_code_name(e.code));
	xfer_close(&ep);
	xfer_sim_model_free(&s);
	return 1;
}
