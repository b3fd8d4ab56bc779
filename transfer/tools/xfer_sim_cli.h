/* transfer/tools/xfer_sim_cli.h: the command line shared by skein-trainer-sim and
 * skein-engine-sim (both include it once; static functions only). */
#ifndef XFER_SIM_CLI_H
#define XFER_SIM_CLI_H

#include "transfer/tools/xfer_sim.h"

#include <ctype.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	const char *path, *dir, *host, *receiver_id, *port_file, *stall_file;
	const char *ticket_job;      /* --ticket JOB:HEX (tests): a p2p sender's hello ticket ... */
	unsigned char ticket_nonce[XFER_NONCE_BYTES]; /* ... outside a job */
	uint64_t bytes, bucket;
	size_t tensors;
	double changed;
	int steps, port, streams, timeout_ms, full_every, zstd, wait_ms, crash_after, keep_previous, interval_ms,
	    first_version;
	uint64_t corrupt_version, crash_during;
	int cuda;   /* --device cuda: the weights live on CUDA device 0 (colocated needs it) */
	int in_job; /* SKEIN_JOB set: the endpoint comes from the environment, coordinated */
	xfer_encoding encoding;
	uint64_t seed;
} sim_opts;

static void sim_usage(FILE *f, const char *prog, const char *role)
{
	fprintf(f,
		"usage: %s --path disk-delta|p2p-tcp|p2p --bytes N [options]\n"
		"       (inside a skein job, SKEIN_JOB set: --bytes N [--tensors K] [--changed F] [--steps S]\n"
		"       [--interval-ms T] [--seed X]; mode, folder, peers and bucket come from the agent,\n"
		"       and every version is an update the head commits or aborts, docs/updates.md)\n"
		"  %s\n"
		"  --bytes N          weights in bytes (suffix K, M, G), bf16\n"
		"  --tensors K        number of tensors (default 64)\n"
		"  --changed F        fraction of elements changed per step (default 0.01)\n"
		"  --steps S          versions to publish / receive (default 3)\n"
		"  --seed X           the model's seed (default 1); trainer and engine must agree\n"
		"  --device host|cuda where the weights live (default host; colocated needs cuda: GPU 0,\n"
		"                     or the first of CUDA_VISIBLE_DEVICES)\n"
		"  --dir DIR          disk-delta: the shared folder\n"
		"  --host A --port P  p2p: the engine listens (port 0: any, see --port-file)\n"
		"  --port-file F      engine: write the port it listens on to F\n"
		"  --streams S --bucket B --timeout-ms T --full-every K --encoding xor|overwrite --zstd L\n"
		"  --keep-previous 0|1  engine: undo journal on failure (default 1)\n"
		"  --receiver-id ID   engine, disk-delta: its name under DIR/receivers/\n"
		"  --wait-ms T        engine: how long to wait for each version (default 60000)\n"
		"  --crash-after V    trainer: exit(3) in the middle of publishing version V (tests)\n"
		"  --interval-ms T    trainer: pause between versions, like a training step (default 0)\n"
		"  --first-version V  trainer: publish versions V..S (default 1; in a job, above its newest)\n"
		"  --corrupt-version V  trainer: one wrong byte goes out in version V, after its checksum (tests)\n"
		"  --crash-during V   engine: exit(3) once the first bucket of version V landed (tests)\n"
		"  --ticket JOB:HEX   trainer, p2p outside a job: present the head's nonce (32 hex digits)\n"
		"                     for JOB in each version's hello (tests: an attacker who learned it)\n"
		"  --stall-file F     engine, in a job: when F names the version just verified, say so\n"
		"                     only 1.5 s later (keeps an update open: demo, head failover tests)\n",
		prog, role);
}

static int sim_parse(int argc, char **argv, sim_opts *o, const char *role)
{
	static const struct option lo[] = {
		{ "path", 1, 0, 'a' }, { "bytes", 1, 0, 'b' }, { "tensors", 1, 0, 'k' }, { "changed", 1, 0, 'c' },
		{ "steps", 1, 0, 's' }, { "seed", 1, 0, 'S' }, { "dir", 1, 0, 'd' }, { "host", 1, 0, 'H' },
		{ "port", 1, 0, 'p' }, { "port-file", 1, 0, 'P' }, { "streams", 1, 0, 'n' }, { "bucket", 1, 0, 'B' },
		{ "timeout-ms", 1, 0, 't' }, { "full-every", 1, 0, 'f' }, { "encoding", 1, 0, 'e' },
		{ "zstd", 1, 0, 'z' }, { "receiver-id", 1, 0, 'r' }, { "wait-ms", 1, 0, 'w' },
		{ "crash-after", 1, 0, 'x' }, { "keep-previous", 1, 0, 'K' }, { "interval-ms", 1, 0, 'i' },
		{ "corrupt-version", 1, 0, 'C' }, { "crash-during", 1, 0, 'D' }, { "stall-file", 1, 0, 'F' },
		{ "device", 1, 0, 'V' }, { "first-version", 1, 0, 'G' }, { "ticket", 1, 0, 'T' }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 },
	};
	memset(o, 0, sizeof *o);
	o->path = "disk-delta";
	o->host = "127.0.0.1";
	o->tensors = 64;
	o->changed = 0.01;
	o->steps = 3;
	o->seed = 1;
	o->streams = 4;
	o->timeout_ms = 30000;
	o->full_every = 10;
	o->wait_ms = 60000;
	o->keep_previous = 1;
	o->first_version = 0; /* 0: 1, or in a job above its newest version */
	int c;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'a': o->path = optarg; break;
		case 'b': if (xfer_parse_bytes(optarg, &o->bytes) != 0) goto bad; break;
		case 'k': o->tensors = (size_t)strtoull(optarg, NULL, 10); break;
		case 'c': o->changed = atof(optarg); break;
		case 's': o->steps = atoi(optarg); break;
		case 'S': o->seed = strtoull(optarg, NULL, 0); break;
		case 'd': o->dir = optarg; break;
		case 'H': o->host = optarg; break;
		case 'p': o->port = atoi(optarg); break;
		case 'P': o->port_file = optarg; break;
		case 'n': o->streams = atoi(optarg); break;
		case 'B': if (xfer_parse_bytes(optarg, &o->bucket) != 0) goto bad; break;
		case 't': o->timeout_ms = atoi(optarg); break;
		case 'f': o->full_every = atoi(optarg); break;
		case 'e':
			if (!strcmp(optarg, "xor")) o->encoding = XFER_ENC_XOR;
			else if (!strcmp(optarg, "overwrite")) o->encoding = XFER_ENC_OVERWRITE;
			else goto bad;
			break;
		case 'z': o->zstd = atoi(optarg); break;
		case 'r': o->receiver_id = optarg; break;
		case 'w': o->wait_ms = atoi(optarg); break;
		case 'x': o->crash_after = atoi(optarg); break;
		case 'K': o->keep_previous = atoi(optarg); break;
		case 'i': o->interval_ms = atoi(optarg); break;
		case 'C': o->corrupt_version = strtoull(optarg, NULL, 10); break;
		case 'D': o->crash_during = strtoull(optarg, NULL, 10); break;
		case 'V':
			if (!strcmp(optarg, "cuda")) o->cuda = 1;
			else if (strcmp(optarg, "host") != 0) goto bad;
			break;
		case 'F': o->stall_file = optarg; break;
		case 'G': o->first_version = atoi(optarg); break;
		case 'T': {
			const char *colon = strrchr(optarg, ':');
			if (!colon || colon == optarg || strlen(colon + 1) != 2 * XFER_NONCE_BYTES) goto bad;
			for (const char *h = colon + 1; *h; h++)
				if (!isxdigit((unsigned char)*h)) goto bad;
			for (int i = 0; i < XFER_NONCE_BYTES; i++) {
				unsigned x;
				if (sscanf(colon + 1 + 2 * i, "%2x", &x) != 1) goto bad;
				o->ticket_nonce[i] = (unsigned char)x;
			}
			static char job[256];
			snprintf(job, sizeof job, "%.*s", (int)(colon - optarg), optarg);
			o->ticket_job = job;
			break;
		}
		case 'h': sim_usage(stdout, argv[0], role); exit(0);
		default: goto bad;
		}
	}
	if (!o->bytes || o->steps < 1 || o->changed < 0 || o->changed > 1 || o->interval_ms < 0 || o->first_version < 0)
		goto bad;
	const char *job = getenv("SKEIN_JOB");
	const char *co = getenv("SKEIN_COORDINATE");
	o->in_job = job && *job && !(co && !strcmp(co, "0")); /* =0: the command line, as outside a job */
	return 0;
bad:
	sim_usage(stderr, argv[0], role);
	return -1;
}

/* Inside a job: the environment's config (its error printed); else the
 * command line's.  -1 on a bad environment. */
static int sim_config(const sim_opts *o, xfer_config *c, xfer_role role, const char *who)
{
	if (o->in_job) {
		xfer_err e = { 0 };
		if (xfer_config_from_env(c, role, &e) == 0) return 0;
		fprintf(stderr, "%s: error: %s\n", who, e.msg);
		return -1;
	}
	xfer_config_init(c);
	c->path = o->path;
	c->role = role;
	if (o->bucket) c->bucket_bytes = o->bucket;
	c->timeout_ms = o->timeout_ms;
	c->keep_previous = o->keep_previous;
	c->disk.dir = o->dir;
	c->disk.encoding = o->encoding;
	c->disk.zstd_level = o->zstd;
	c->disk.full_every = o->full_every;
	c->disk.receiver_id = o->receiver_id;
	c->p2p.host = o->host;
	c->p2p.port = o->port;
	c->p2p.streams = o->streams;
	return 0;
}

#endif
