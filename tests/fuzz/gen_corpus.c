/* tests/fuzz/gen_corpus: writes the seed corpus of every fuzz target
 * (tests/fuzz/corpus/<target>/) with the real encoders: the codecs, the
 * protobuf packers, the disk-delta sender, the delta encoder, the p2p hellos,
 * the weight update records and the head's answers to libskein.
 * `make fuzz-corpus` runs it; the output is deterministic (fixed bytes, no
 * clock), except the disk-delta chain id and the seal nonces, which are
 * random by design.  Kept small: a handful of inputs per target. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jobs/job_codec.h"
#include "jobs/job_spec.h"
#include "jobs/job_state.h"
#include "jobs/update_state.h"
#include "membership/mbr_codec.h"
#include "proto/control.pb-c.h"
#include "proto/jobs.pb-c.h"
#include "proto/weights.pb-c.h"
#include "raft/raft_codec.h"
#include "transfer/core/xfer_int.h"
#include "tests/unit/update_fixture.h"

static const char *root;

static void put(const char *target, const char *name, const void *p, size_t n)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", root, target);
	if (mkdir(path, 0755) != 0 && errno != EEXIST) { perror(path); exit(1); }
	snprintf(path, sizeof path, "%s/%s/%s", root, target, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) { perror(path); exit(1); }
}

static void die(const char *what) { fprintf(stderr, "gen_corpus: %s\n", what); exit(1); }

/* ---- jobs ---- */

static size_t spec_from_flags(int argc, char **argv, uint8_t *out, size_t cap)
{
	job_spec s;
	char err[300];
	job_spec_defaults(&s);
	if (job_spec_parse_args(&s, argc, argv, err, sizeof err) != 0 || job_spec_validate(&s, err, sizeof err) != 0)
		die(err);
	Skein__Jobs__JobSpec pb;
	job_spec_to_pb(&s, &pb);
	size_t n = skein__jobs__job_spec__get_packed_size(&pb);
	if (n > cap) die("spec too large");
	skein__jobs__job_spec__pack(&pb, out);
	return n;
}

static char *split_argv[] = { "--name", "r1", "--actor-num-nodes", "1", "--actor-num-gpus-per-node", "4",
			      "--rollout-num-gpus", "4", "--rollout-num-gpus-per-engine", "2",
			      "--trainer-cmd", "python train.py", "--rollout-cmd", "python serve.py" };
static char *colo_argv[] = { "--colocate", "--update-weight-transfer-mode=disk-delta",
			     "--update-weight-disk-dir=/data/w", "--trainer-cmd=t", "--rollout-cmd=r",
			     "--restart-backoff", "500ms:1m", "--stop-grace=2s", "--max-restarts", "3",
			     "--update-weight-buffer-size", "64MiB" };

static void jobflags(void)
{
	char *sets[][16] = {
		{ "--name", "r1", "--actor-num-nodes", "1", "--actor-num-gpus-per-node", "4", "--rollout-num-gpus", "4",
		  "--rollout-num-gpus-per-engine", "2", "--trainer-cmd", "python train.py", "--rollout-cmd", "x", NULL },
		{ "--colocate", "--update-weight-transfer-mode=disk-delta", "--update-weight-disk-dir=/data/w",
		  "--trainer-cmd=t", "--restart-backoff", "500ms:1m", "--stop-grace=2s", "--max-restarts", "3", NULL },
		{ "--update-weight-buffer-size", "1GiB", "--num-gpus-per-node", "8", "--update-weight-transfer-mode",
		  "broadcast_packed", "--trainer-cmd", "t", NULL },
		{ "--name=bad name", "--actor_num_nodes=2", "--unknown", NULL },
	};
	for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
		char buf[1024];
		size_t n = 0;
		for (int k = 0; sets[i][k]; k++) {
			size_t l = strlen(sets[i][k]) + 1;
			memcpy(buf + n, sets[i][k], l);
			n += l;
		}
		char name[32];
		snprintf(name, sizeof name, "flags-%zu", i);
		put("fuzz_jobflags", name, buf, n - 1);
	}
}

static void jobyaml(void)
{
	static const char *files[] = {
		"name: r1\nactor-num-nodes: 1\nactor-num-gpus-per-node: 4\nrollout-num-gpus: 4\n"
		"rollout-num-gpus-per-engine: 2\ntrainer-cmd: python train.py\nrollout-cmd: python serve.py\n",
		"---\ncolocate: true\nupdate_weight_transfer_mode: disk-delta\nupdate-weight-disk-dir: \"/data/w\"\n"
		"trainer-cmd: 't'\nrestart-backoff: 500ms:1m\nstop-grace: 2s\nmax-restarts: 3\n...\n",
		"{colocate: yes, update-weight-buffer-size: 64MiB, trainer-cmd: t}\n",
		"actor-num-nodes: [1, 2]\n",
		"a: &x 1\nb: *x\n",
	};
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		char name[32];
		snprintf(name, sizeof name, "job-%zu.yaml", i);
		put("fuzz_jobyaml", name, files[i], strlen(files[i]));
	}
}

/* ---- raft ---- */

static void raft_one(const char *name, const raft_msg *m, const char *also)
{
	uint8_t *out;
	size_t len;
	if (raft_codec_encode(m, &out, &len) != 0) die("raft encode");
	put("fuzz_raft", name, out, len);
	/* the fuzz target also wraps its input in a frame: the bare payload */
	put("fuzz_raft", also, out + WIRE_HDR_LEN, len - WIRE_HDR_LEN);
	free(out);
}

static size_t job_entry(uint8_t *out, size_t cap)
{
	uint8_t spec[2048];
	size_t sl = spec_from_flags(sizeof split_argv / sizeof split_argv[0], split_argv, spec, sizeof spec);
	Skein__Jobs__JobSpec *sp = skein__jobs__job_spec__unpack(NULL, sl, spec);
	Skein__Jobs__Job j = SKEIN__JOBS__JOB__INIT;
	j.spec = sp;
	j.state = "pending";
	j.reason = "";
	j.seq = 1;
	j.version = 1;
	uint8_t *e;
	size_t len;
	if (!sp || job_codec_pack(&j, &e, &len) != 0 || len > cap) die("job entry");
	memcpy(out, e, len);
	free(e);
	skein__jobs__job_spec__free_unpacked(sp, NULL);
	return len;
}

static void raft(void)
{
	raft_msg m = { .type = RAFT_MSG_VOTE_REQ, .term = 3, .from = "n1", .last_index = 7, .last_term = 2 };
	raft_one("vote-req", &m, "vote-req.payload");
	m = (raft_msg){ .type = RAFT_MSG_VOTE_RESP, .term = 3, .from = "n2", .prevote = true, .granted = true };
	raft_one("vote-resp", &m, "vote-resp.payload");
	uint8_t job[4096];
	size_t jl = job_entry(job, sizeof job);
	static const uint8_t kv[] = "\x01" "foo\0bar";
	raft_entry ents[2] = { { 8, 3, JOB_ENTRY_SUBMIT, job, jl }, { 9, 3, 1, kv, sizeof kv - 1 } };
	m = (raft_msg){ .type = RAFT_MSG_APPEND_REQ, .term = 3, .from = "n1", .prev_index = 7, .prev_term = 2,
			.commit = 7, .echo = 11, .entries = ents, .nentries = 2 };
	raft_one("append-req", &m, "append-req.payload");
	m = (raft_msg){ .type = RAFT_MSG_APPEND_RESP, .term = 3, .from = "n2", .success = true, .last_index = 9,
			.prev_index = 7, .echo = 11 };
	raft_one("append-resp", &m, "append-resp.payload");
	job_state *js = job_state_new();
	if (!js || job_state_apply(js, JOB_ENTRY_SUBMIT, job, jl) != 0) die("job state");
	uint8_t *snap;
	size_t sl;
	if (job_state_serialize(js, &snap, &sl) != 0) die("job state serialize");
	job_state_free(&js);
	raft_snap_meta meta = { .index = 9, .term = 3 };
	const char *voters[] = { "n1", "n2", "n3" };
	if (raft_voters_make(&meta.voters, voters, 3, NULL, 0) != 0) die("voters");
	m = (raft_msg){ .type = RAFT_MSG_SNAP_REQ, .term = 3, .from = "n1", .snap = &meta, .data = snap, .len = sl,
			.offset = 0, .total = sl, .echo = 12 };
	raft_one("snap-req", &m, "snap-req.payload");
	free(snap);
	m = (raft_msg){ .type = RAFT_MSG_SNAP_RESP, .term = 3, .from = "n2", .success = true, .last_index = 9,
			.offset = 100, .echo = 12 };
	raft_one("snap-resp", &m, "snap-resp.payload");
	m = (raft_msg){ .type = RAFT_MSG_TIMEOUT_NOW, .term = 4, .from = "n1" };
	raft_one("timeout-now", &m, "timeout-now.payload");
}

/* ---- control ---- */

static void request(const char *name, const char *cmd, char **args, size_t nargs, uint64_t term, const uint8_t *payload,
		    size_t plen)
{
	Skein__Control__Request q = SKEIN__CONTROL__REQUEST__INIT;
	q.cmd = (char *)cmd;
	q.args = args;
	q.n_args = nargs;
	q.format = "text";
	q.term = term;
	q.payload.data = (uint8_t *)payload;
	q.payload.len = plen;
	size_t n = skein__control__request__get_packed_size(&q);
	uint8_t *b = malloc(n + 1);
	if (!b) die("oom");
	skein__control__request__pack(&q, b);
	put("fuzz_control", name, b, n);
	put("fuzz_envelope", name, b, n);
	if (!strcmp(cmd, "info")) put("fuzz_seal", "info-request", b, n);
	free(b);
}

static void control(void)
{
	request("info", "info", NULL, 0, 0, NULL, 0);
	uint8_t spec[4096];
	size_t sl = spec_from_flags(sizeof split_argv / sizeof split_argv[0], split_argv, spec, sizeof spec);
	char *sub[] = { "submit", "0123456789abcdef" };
	request("job-submit", "job", sub, 2, 0, spec, sl);
	sl = spec_from_flags(sizeof colo_argv / sizeof colo_argv[0], colo_argv, spec, sizeof spec);
	request("job-submit-colocated", "job", sub, 2, 0, spec, sl);

	static const char *env[] = { "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500" };
	job_order mo = { .id = "r1/trainer-0", .job = "r1", .trainer = true, .engine = -1, .ngpus = 2, .gpus = { 0, 1 },
			 .cmd = "python train.py", .nenv = 2, .env = env, .gen = 1 };
	const job_order *mos[1] = { &mo };
	static const char *drained[] = { "n9" };
	job_assignment as = { .head = "n1", .n = 1, .members = mos, .ndrained = 1, .drained = drained };
	uint8_t buf[4096], *enc;
	size_t n;
	if (job_codec_assignment_encode(&as, &enc, &n) != 0) die("assignment encode");
	request("assign", "assign", NULL, 0, 3, enc, n);
	free(enc);

	job_member_status ms = { .id = "r1/trainer-0", .job = "r1", .gen = 1, .pid = 4242, .state = "failed",
				 .last_exit = -9, .reason = "killed" };
	job_report rep = { .node = "n2", .free_port = 29500, .n = 1, .members = &ms };
	if (job_codec_report_encode(&rep, &enc, &n) != 0) die("report encode");
	request("report", "report", NULL, 0, 3, enc, n);
	free(enc);

	raft_msg m = { .type = RAFT_MSG_VOTE_REQ, .term = 3, .from = "n1", .last_index = 7, .last_term = 2 };
	uint8_t *out;
	size_t len;
	if (raft_codec_encode(&m, &out, &len) != 0) die("raft encode");
	request("raft", "raft", NULL, 0, 3, out, len);
	free(out);

	Skein__Control__Response r = SKEIN__CONTROL__RESPONSE__INIT;
	r.code = 1;
	r.error = "job r1 exists already";
	r.body = "";
	n = skein__control__response__pack(&r, buf);
	put("fuzz_control", "response-error", buf, n);
	uint8_t nonce[16] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };
	r.nonce.data = nonce;
	r.nonce.len = sizeof nonce;
	n = skein__control__response__pack(&r, buf);
	put("fuzz_envelope", "response-with-nonce", buf, n);
}

/* ---- disk-delta ---- */

static void disk(void)
{
	char dir[] = "/tmp/skein-gen-corpus.XXXXXX";
	if (!mkdtemp(dir)) die("mkdtemp");
	for (int run = 0; run < 2; run++) {
		static uint16_t w[300];
		static float b[7];
		static int64_t step;
		xfer_err err;
		int64_t sw[2] = { 10, 30 }, sb[1] = { 7 };
		xfer_manifest *m = xfer_manifest_new();
		if (!m || xfer_manifest_add(m, "w", XFER_BF16, 2, sw, w, XFER_MEM_HOST, &err) != 0 ||
		    xfer_manifest_add(m, "b", XFER_F32, 1, sb, b, XFER_MEM_HOST, &err) != 0 ||
		    xfer_manifest_add(m, "step", XFER_I64, 0, NULL, &step, XFER_MEM_HOST, &err) != 0)
			die("manifest");
		char sub[600];
		snprintf(sub, sizeof sub, "%s/run%d", dir, run);
		xfer_config c;
		xfer_config_init(&c);
		c.path = "disk-delta";
		c.role = XFER_SENDER;
		c.disk.dir = sub;
		c.disk.encoding = run ? XFER_ENC_XOR : XFER_ENC_OVERWRITE;
		c.disk.zstd_level = run ? 3 : 0;
		c.disk.gc = 0;
		c.threads = 1;
		xfer_endpoint *ep = NULL;
		if (mkdir(sub, 0755) != 0 || xfer_open(&ep, &c, m, &err) != 0) die(err.msg);
		for (uint64_t v = 1; v <= 2; v++) {
			w[v * 7] ^= 0x1234;
			b[v] += 1.5f;
			step = (int64_t)v;
			if (xfer_send(ep, v, &err) != 0) die(err.msg);
			char path[800], *txt;
			size_t len;
			snprintf(path, sizeof path, "%s/weight_v%06llu/index", sub, (unsigned long long)v);
			if (xfer_read_file(path, &txt, &len, &err) != 0) die(err.msg);
			char name[64];
			snprintf(name, sizeof name, "index-%s-v%llu", run ? "xor-zstd" : "overwrite", (unsigned long long)v);
			put("fuzz_disk_index", name, txt, len);
			free(txt);
		}
		xfer_close(&ep);
		xfer_manifest_free(&m);
	}
	xfer_rmtree(dir);
}

static void delta(void)
{
	static const size_t eszs[] = { 1, 2, 4, 8 };
	for (int enc = 0; enc < 2; enc++) {
		for (size_t e = 0; e < 4; e++) {
			size_t esz = eszs[e], nel = 64, n = nel * esz;
			uint8_t old[512], nw[512];
			for (size_t i = 0; i < n; i++) old[i] = nw[i] = (uint8_t)(i * 31 + esz);
			for (size_t i = 3; i < n; i += 37) nw[i] ^= 0x5a;
			xfer_buf out = { 0 }, z = { 0 };
			uint64_t changed;
			xfer_err err;
			if (xfer_delta_encode((xfer_encoding)enc, esz, old, nw, n, 0, &out, &changed, NULL, &err) != 0)
				die(err.msg);
			uint8_t head[3] = { (uint8_t)(enc | e << 1 | (e & 1) << 4), (uint8_t)nel, 0 };
			xfer_buf in = { 0 };
			if (xfer_buf_append(&in, head, 3) || xfer_buf_append(&in, out.p, out.len)) die("oom");
			char name[64];
			snprintf(name, sizeof name, "%s-esz%zu", enc ? "xor" : "overwrite", esz);
			put("fuzz_delta", name, in.p, in.len);
			if (esz == 4) { /* and compressed, as with --zstd */
				if (xfer_zstd_compress(3, out.p, out.len, &z, &err) != 0) die(err.msg);
				in.len = 0;
				head[0] |= 8;
				if (xfer_buf_append(&in, head, 3) || xfer_buf_append(&in, z.p, z.len)) die("oom");
				snprintf(name, sizeof name, "%s-esz%zu-zstd", enc ? "xor" : "overwrite", esz);
				put("fuzz_delta", name, in.p, in.len);
			}
			xfer_buf_free(&in);
			xfer_buf_free(&out);
			xfer_buf_free(&z);
		}
	}
}

/* ---- p2p-tcp and p2p-ucx ---- */

/* A packed hello of hl bytes in buf, then the manifest text. */
static void p2p_put(uint8_t *buf, size_t hl, const char *desc, size_t dl, const char *fmt, uint32_t streams,
		    uint64_t bucket)
{
	char name[64];
	memcpy(buf + hl, desc, dl);
	snprintf(name, sizeof name, fmt, streams, (unsigned long long)bucket);
	put("fuzz_p2p", name, buf, hl + dl);
}

static void p2p(void)
{
	/* the receiver's manifest of tests/fuzz/fuzz_p2p.c */
	static char bytes[4096];
	xfer_err err;
	int64_t a[2] = { 16, 32 }, b[1] = { 100 };
	xfer_manifest *m = xfer_manifest_new();
	if (!m || xfer_manifest_add(m, "layer.0.w", XFER_BF16, 2, a, bytes, XFER_MEM_HOST, &err) != 0 ||
	    xfer_manifest_add(m, "layer.0.b", XFER_F32, 1, b, bytes, XFER_MEM_HOST, &err) != 0 ||
	    xfer_manifest_add(m, "step", XFER_I64, 0, NULL, bytes, XFER_MEM_HOST, &err) != 0)
		die("manifest");
	size_t dl;
	char *desc = xfer_manifest_describe(m, &dl);
	static const struct { uint32_t streams; uint64_t bucket; } hs[] = { { 1, 512ull << 20 }, { 3, 1024 }, { 4, 777 },
									     { 64, 8192 } };
	for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) {
		xfer_tcp_hello h = { .kind = XFER_TCP_CONTROL, .nstreams = hs[i].streams, .session = 0x1234567 + i,
				     .bucket_bytes = hs[i].bucket, .manifest_len = dl };
		uint8_t buf[4096];
		xfer_tcp_hello_pack(&h, buf);
		p2p_put(buf, XFER_TCP_HELLO_BYTES, desc, dl, "hello-%u-streams-%llu", hs[i].streams, hs[i].bucket);
	}
	/* p2p-ucx's hello: kinds (shared memory, RDMA, shared memory and TCP)
	 * and boot ids, a full one, none and a short one, fixed so the output
	 * stays the same (the receiver compares the boot id with its own only
	 * to choose a transport) */
	static const struct { uint32_t stripes, kinds; uint64_t bucket; const char *boot; } us[] = {
		{ 2, 2, 8192, "0b5d1c2e-3f4a-4b6c-8d9e-0f1a2b3c4d5e" }, { 16, 1, 777, "" }, { 1, 6, 512ull << 20, "x" } };
	for (size_t i = 0; i < sizeof us / sizeof us[0]; i++) {
		xfer_ucx_hello h = { .flags = XFER_UCX_F_AUTO, .kinds = us[i].kinds, .nstripes = us[i].stripes,
				     .bucket_bytes = us[i].bucket, .manifest_len = dl };
		snprintf(h.boot_id, sizeof h.boot_id, "%s", us[i].boot);
		snprintf(h.host, sizeof h.host, "trainer-%zu", i);
		uint8_t buf[4096];
		xfer_ucx_hello_pack(&h, buf);
		p2p_put(buf, XFER_UCX_HELLO_BYTES, desc, dl, "ucx-hello-%u-stripes-%llu", us[i].stripes, us[i].bucket);
	}
	xfer_vhead vh = { .magic = "SKV1", .ntensors = 3, .version = 2, .total = xfer_manifest_bytes(m) };
	put("fuzz_p2p", "version-header", &vh, sizeof vh);
	xfer_tcp_shead sh = { .magic = "SKS1", .stream = 0, .version = 2, .chunk = 1, .off = 4096, .len = 4096 };
	put("fuzz_p2p", "stripe-header", &sh, sizeof sh);
	free(desc);
	xfer_manifest_free(&m);
}

/* ---- gossip ---- */

static void gossip_one(const char *name, const mbr_msg *msgs, size_t n)
{
	mbr_pkt p;
	if (mbr_pkt_init(&p, 1400) != 0) die("oom");
	for (size_t i = 0; i < n; i++) {
		uint8_t *blob;
		size_t len;
		if (mbr_codec_encode_msg(&msgs[i], &blob, &len) != 0 || mbr_pkt_add(&p, blob, len) != 0) die("gossip");
		free(blob);
	}
	mbr_pkt_finish(&p, 0);
	put("fuzz_gossip", name, p.buf, p.len);
	if (!strcmp(name, "ping")) put("fuzz_seal", "ping-packet", p.buf, p.len);
	mbr_pkt_free(&p);
}

static void gossip(void)
{
	mbr_addr a1, a2;
	mbr_addr_parse("127.0.0.2:7946", &a1);
	mbr_addr_parse("127.0.0.3:7946", &a2);
	mbr_msg ping = { .type = MBR_MSG_PING, .seq = 5, .name = "fuzz", .from = "n2", .src_addr = a1 };
	gossip_one("ping", &ping, 1);
	mbr_msg ack = { .type = MBR_MSG_ACK, .seq = 5 };
	static const uint8_t meta[] = "role=trainer";
	mbr_msg alive = { .type = MBR_MSG_ALIVE, .name = "n3", .addr = a2, .gen = 2, .inc = 4, .meta = meta,
			  .meta_len = sizeof meta - 1 };
	mbr_msg suspect = { .type = MBR_MSG_SUSPECT, .name = "n3", .gen = 2, .inc = 4, .from = "n2" };
	mbr_msg three[3] = { ack, alive, suspect };
	gossip_one("ack-alive-suspect", three, 3);
	mbr_wire_state st[2] = { { .name = "n2", .addr = a1, .gen = 1, .inc = 1, .status = MBR_ALIVE },
				 { .name = "n3", .addr = a2, .gen = 2, .inc = 4, .status = MBR_SUSPECT } };
	mbr_msg pp = { .type = MBR_MSG_PUSHPULL, .join = true, .from = "n2", .src_addr = a1, .states = st, .nstates = 2 };
	gossip_one("pushpull", &pp, 1);
	mbr_msg ind = { .type = MBR_MSG_INDIRECT, .seq = 9, .name = "n3", .addr = a2, .nack = true, .from = "n2",
			.src_addr = a1 };
	gossip_one("indirect", &ind, 1);
}

/* ---- weight updates (fuzz_wv): records of each state, a table's snapshot ---- */

static void rec_fill(update_rec *u, update_engine *e, const char *job, uint64_t v, const char *state, const char *eng)
{
	update_fixture(u, e, 2, job, v, state, eng);
	u->has_digest = true;
	memset(u->digest, 0xa5, sizeof u->digest);
	u->bytes = 16u << 20;
	u->tensors = 7;
	e[0].seconds = e[1].seconds = 0.5;
	u->started_ms = 1700000000000ull;
	u->wire_bytes = 4u << 20;
	u->density = 0.25;
	u->update_seconds = 0.75;
}

static void update_one(update_state *s, const char *name, const update_rec *u)
{
	uint8_t *b;
	size_t n;
	if (update_rec_encode(u, &b, &n) < 0 || update_state_apply(s, b, n) < 0) die("wv record refused");
	put("fuzz_wv", name, b, n);
	free(b);
}

static void wv(void)
{
	update_state *s = update_state_new();
	update_rec u;
	update_engine e[2];
	rec_fill(&u, e, "j", 2, "preparing", "pending");
	update_one(s, "update-preparing", &u);
	rec_fill(&u, e, "j", 2, "committed", "verified");
	snprintf(e[1].state, sizeof e[1].state, "dropped");
	e[1].reason = "node n3 failed";
	update_one(s, "update-committed-dropped", &u);
	rec_fill(&u, e, "j", 3, "preparing", "pending");
	update_one(s, "update-preparing-3", &u);
	rec_fill(&u, e, "j", 3, "aborted", "failed");
	u.reason = "j/engine-0: checksum of tensor 3 differs";
	snprintf(u.cause, sizeof u.cause, "engine");
	update_one(s, "update-aborted", &u);
	uint8_t *b;
	size_t n;
	if (update_state_serialize(s, &b, &n) < 0) die("wv snapshot");
	put("fuzz_wv", "snapshot", b, n);
	free(b);
	update_state_free(&s);
}

/* ---- the head's answers to libskein (fuzz_wv_reply) ---- */

#define UPDATE_PUT(name, kind, msg)                                                   \
	do {                                                                      \
		size_t n_ = skein__weights__##kind##__get_packed_size(msg);       \
		uint8_t *b_ = malloc(n_ + 1);                                     \
		if (!b_) die("out of memory");                                    \
		skein__weights__##kind##__pack(msg, b_);                          \
		put("fuzz_wv_reply", name, b_, n_);                               \
		free(b_);                                                         \
	} while (0)

static void update_reply(void)
{
	Skein__Weights__Peer p[2] = { SKEIN__WEIGHTS__PEER__INIT, SKEIN__WEIGHTS__PEER__INIT }, *pp[2] = { &p[0], &p[1] };
	p[0].member = "j/engine-0", p[0].node = "n2", p[0].endpoint = "10.0.0.2:7400", p[0].rank = 1;
	p[1].member = "j/engine-1", p[1].node = "n3", p[1].endpoint = "10.0.0.3:7400", p[1].rank = 2;
	Skein__Weights__BeginReply br = SKEIN__WEIGHTS__BEGIN_REPLY__INIT;
	br.version = 4, br.base_version = 3, br.n_peers = 2, br.peers = pp, br.timeout_ms = 30000;
	UPDATE_PUT("begin-reply", begin_reply, &br);

	static uint8_t nccl_id[128];
	for (size_t i = 0; i < sizeof nccl_id; i++) nccl_id[i] = (uint8_t)i;
	Skein__Weights__Instruction in = SKEIN__WEIGHTS__INSTRUCTION__INIT;
	in.kind = "idle";
	UPDATE_PUT("instruction-idle", instruction, &in);
	in.kind = "receive", in.version = 4, in.base_version = 3, in.mode = "p2p", in.peer = "10.0.0.1:7400";
	in.timeout_ms = 30000;
	UPDATE_PUT("instruction-receive-p2p", instruction, &in);
	in.mode = "broadcast", in.peer = "", in.rank = 1, in.nranks = 3;
	in.setup.data = nccl_id, in.setup.len = sizeof nccl_id;
	UPDATE_PUT("instruction-receive-nccl", instruction, &in);
	in.kind = "abort", in.mode = "", in.rank = 0, in.nranks = 0, in.setup.len = 0, in.reason = "j/engine-1: gone";
	UPDATE_PUT("instruction-abort", instruction, &in);
	in.kind = "catchup", in.reason = "", in.version = 7, in.peer = "10.0.0.2:7400";
	UPDATE_PUT("instruction-catchup", instruction, &in);

	Skein__Weights__Engine e[2] = { SKEIN__WEIGHTS__ENGINE__INIT, SKEIN__WEIGHTS__ENGINE__INIT },
			       *ep[2] = { &e[0], &e[1] };
	e[0].member = "j/engine-0", e[0].node = "n2", e[0].state = "verified", e[0].seconds = 0.25;
	e[1].member = "j/engine-1", e[1].node = "n3", e[1].state = "dropped", e[1].reason = "node n3 failed";
	Skein__Weights__Update u = SKEIN__WEIGHTS__UPDATE__INIT;
	u.job = "j", u.version = 4, u.mode = "p2p", u.state = "committed", u.n_engines = 2, u.engines = ep;
	u.wire_bytes = 1 << 20, u.update_seconds = 0.5, u.implementation_seconds = 0.3;
	Skein__Weights__Outcome o = SKEIN__WEIGHTS__OUTCOME__INIT;
	o.job = "j", o.version = 4, o.state = "committed", o.record = &u;
	UPDATE_PUT("outcome-committed", outcome, &o);
	o.state = "aborted", o.reason = "j/engine-0 on n2: checksum mismatch", o.record = NULL;
	UPDATE_PUT("outcome-aborted", outcome, &o);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR   (writes DIR/<target>/...; make fuzz-corpus)\n", argv[0]);
		return 2;
	}
	root = argv[1];
	if (mkdir(root, 0755) != 0 && errno != EEXIST) { perror(root); return 1; }
	jobflags();
	jobyaml();
	raft();
	control();
	disk();
	delta();
	p2p();
	gossip();
	wv();
	update_reply();
	return 0;
}
