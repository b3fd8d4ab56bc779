/* tests/tools/skein_forge: crafts control requests as an attacker would, for
 * tests/agent/auth_test.sh, and the `wv` requests of a job's member, for the
 * gate and bad-input checks of tests/agent/updates_test.sh.  Not installed;
 * not part of skein.
 *
 *   skein-forge send ENDPOINT [--key FILE [--operator]] [--cmd CMD] [--arg A]...
 *        [--term T] [--sender S] [--recipient R] [--time-offset-ms N]
 *        [--assign JOB/MEMBER:CMD] [--submit-disk-dir DIR] [--oneway] [--save FILE]
 *     builds one request (sealed when --key is given, addressed to R, by
 *     default the endpoint), sends it, saves the exact bytes sent with
 *     --save, and prints the answer: "code N: error" and the body.
 *     --submit-disk-dir sends `job submit` of a default job (trainer `true`)
 *     with that --update-weight-disk-dir, unchecked by skeinctl.
 *   skein-forge replay ENDPOINT FILE [--key FILE [--operator]]
 *     sends saved bytes again, unchanged, and prints the answer.
 *   skein-forge wv ENDPOINT VERB KIND [FIELD=VALUE]...
 *     one plain `wv VERB` request whose payload is KIND, a message of
 *     proto/weights.proto (begin, done, query, status), its fields set by
 *     name: numbers, true/false, strings; bytes as hex:.., zeros:N or text;
 *     done's failed=[!]MEMBER:REASON adds a PeerFailure (! sets the
 *     receiver's verdict) and may be given again.  KIND raw sends the bytes
 *     of hex=.. as the payload.  forwarded=1, sender=NAME and args=N (VERB
 *     said N times; 1 by default) set the request's own fields.  Prints one
 *     line, "code=N error=TEXT payload=LEN" (the answer's payload bytes),
 *     and for a begin " nonce=HEX" when the head's answer carries one.
 * Exit status: send and replay, the answer's code; wv, 0 once answered;
 * 2 on bad usage; 3 when no answer came. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent/agent_rpc.h"
#include "common/sk_time.h"
#include "agent/agent_wire.h"
#include "jobs/job_codec.h"
#include "jobs/job_spec.h"
#include "proto/control.pb-c.h"
#include "proto/weights.pb-c.h"

static int dial(const char *ep)
{
	int fd;
	if (!strncmp(ep, "unix:", 5)) {
		struct sockaddr_un su = { .sun_family = AF_UNIX };
		snprintf(su.sun_path, sizeof su.sun_path, "%s", ep + 5);
		fd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&su, sizeof su) == 0) return fd;
	} else {
		struct sockaddr_storage ss;
		unsigned sl;
		if (agent_wire_parse_addr(ep, &ss, &sl) < 0) return -1;
		fd = socket(ss.ss_family, SOCK_STREAM, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&ss, sl) == 0) return fd;
	}
	fprintf(stderr, "skein-forge: cannot reach %s: %s\n", ep, strerror(errno));
	if (fd >= 0) close(fd);
	return -1;
}

static int send_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
		if (k <= 0) return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Sends one frame and, unless one-way, waits up to wait_ms for one frame
 * back: *out is the answer (NULL for one-way).  0, or 3 with why no
 * readable answer came in why ("" when the endpoint was not reached: dial
 * said so on stderr). */
static int exchange(const char *ep, const uint8_t *msg, size_t len, const agent_rpc_cred *cred,
		    const uint8_t *nonce, bool oneway, int wait_ms, Skein__Control__Response **out,
		    char *why, size_t cap)
{
	*out = NULL;
	why[0] = 0;
	int fd = dial(ep);
	if (fd < 0) return 3;
	uint32_t be = htonl((uint32_t)len);
	if (send_all(fd, (uint8_t *)&be, 4) < 0 || send_all(fd, msg, len) < 0) {
		close(fd);
		return 3;
	}
	if (oneway) {
		/* nothing answers; give the agent a moment to read it */
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		poll(&pf, 1, 300);
		close(fd);
		return 0;
	}
	uint8_t hdr[4];
	size_t got = 0;
	uint8_t *body = NULL;
	size_t want = 0;
	for (;;) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		if (poll(&pf, 1, wait_ms) <= 0) break;
		ssize_t k = got < 4 ? recv(fd, hdr + got, 4 - got, 0) : recv(fd, body + got - 4, want - (got - 4), 0);
		if (k <= 0) break;
		got += (size_t)k;
		if (got == 4) {
			memcpy(&be, hdr, 4);
			want = ntohl(be);
			body = want <= WIRE_ANSWER_MAX ? malloc(want ? want : 1) : NULL;
			if (!body) break;
		}
		if (got >= 4 && got - 4 == want) break;
	}
	close(fd);
	if (!body || got - 4 != want) {
		snprintf(why, cap, "no answer (the agent closed the connection)");
		free(body);
		return 3;
	}
	char open_why[200];
	*out = agent_resp_open(body, want, cred, nonce, open_why, sizeof open_why);
	free(body);
	if (!*out) {
		snprintf(why, cap, "unreadable answer: %s", open_why);
		return 3;
	}
	return 0;
}

/* send and replay: the answer as skeinctl would show it; its code. */
static int exchange_show(const char *ep, const uint8_t *msg, size_t len, const agent_rpc_cred *cred,
			 const uint8_t *nonce, bool oneway)
{
	Skein__Control__Response *r;
	char why[256];
	if (exchange(ep, msg, len, cred, nonce, oneway, 3000, &r, why, sizeof why)) {
		if (why[0]) printf("%s\n", why);
		return 3;
	}
	if (!r) {
		printf("sent (one-way)\n");
		return 0;
	}
	printf("code %d: %s\n%s", r->code, r->error, r->body);
	int code = r->code;
	skein__control__response__free_unpacked(r, NULL);
	return code;
}

/* ---- wv: a member's weight-update requests ---- */

static const struct {
	const char *kind;
	const ProtobufCMessageDescriptor *desc;
} UPDATE_KINDS[] = {
	{ "begin", &skein__weights__begin__descriptor },
	{ "done", &skein__weights__done__descriptor },
	{ "query", &skein__weights__query__descriptor },
	{ "status", &skein__weights__engine_status__descriptor },
};

/* hex:.. -> bytes (malloc'd; *n its length), -1 on a bad digit or odd count */
static int unhex(const char *h, uint8_t **out, size_t *n)
{
	size_t l = strlen(h);
	if (l % 2) return -1;
	*out = malloc(l / 2 + 1);
	for (size_t i = 0; i < l / 2; i++) {
		unsigned v;
		if (sscanf(h + 2 * i, "%2x", &v) != 1 || !strchr("0123456789abcdefABCDEF", h[2 * i + 1])) {
			free(*out);
			return -1;
		}
		(*out)[i] = (uint8_t)v;
	}
	*n = l / 2;
	return 0;
}

/* Sets the singular field `name` of m from text, by its descriptor; the
 * memory of bytes fields goes on keep (freed by the caller).  -1: no such
 * field or a value it cannot take. */
static int update_set(ProtobufCMessage *m, const char *name, const char *text, void **keep)
{
	const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(m->descriptor, name);
	if (!f || f->label == PROTOBUF_C_LABEL_REPEATED) return -1;
	void *p = (char *)m + f->offset;
	char *end;
	switch (f->type) {
	case PROTOBUF_C_TYPE_STRING:
		*(const char **)p = text;
		return 0;
	case PROTOBUF_C_TYPE_BOOL:
		*(protobuf_c_boolean *)p = !strcmp(text, "true") || !strcmp(text, "1");
		return !strcmp(text, "true") || !strcmp(text, "false") || !strcmp(text, "1") || !strcmp(text, "0") ? 0 : -1;
	case PROTOBUF_C_TYPE_UINT64:
		*(uint64_t *)p = strtoull(text, &end, 0);
		return *end || !*text ? -1 : 0;
	case PROTOBUF_C_TYPE_UINT32:
		*(uint32_t *)p = (uint32_t)strtoul(text, &end, 0);
		return *end || !*text ? -1 : 0;
	case PROTOBUF_C_TYPE_INT32:
		*(int32_t *)p = (int32_t)strtol(text, &end, 0);
		return *end || !*text ? -1 : 0;
	case PROTOBUF_C_TYPE_DOUBLE:
		*(double *)p = strtod(text, &end);
		return *end || !*text ? -1 : 0;
	case PROTOBUF_C_TYPE_BYTES: {
		/* zeros:N: N zero bytes (too many for a command line as hex) */
		ProtobufCBinaryData *b = p;
		if (!strncmp(text, "zeros:", 6)) {
			b->len = strtoull(text + 6, NULL, 10);
			b->data = *keep = calloc(1, b->len + 1);
		} else if (!strncmp(text, "hex:", 4)) {
			if (unhex(text + 4, &b->data, &b->len) < 0) return -1;
			*keep = b->data;
		} else {
			b->data = (uint8_t *)text;
			b->len = strlen(text);
		}
		return 0;
	}
	default:
		return -1;
	}
}

static int forge_wv(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: skein-forge wv ENDPOINT VERB KIND [FIELD=VALUE]...\n");
		return 2;
	}
	const char *ep = argv[2], *verb = argv[3], *kind = argv[4];
	const ProtobufCMessageDescriptor *desc = NULL;
	for (size_t i = 0; i < sizeof UPDATE_KINDS / sizeof UPDATE_KINDS[0]; i++)
		if (!strcmp(kind, UPDATE_KINDS[i].kind)) desc = UPDATE_KINDS[i].desc;
	if (!desc && strcmp(kind, "raw")) {
		fprintf(stderr, "skein-forge: wv KIND is begin, done, query, status or raw, not %s\n", kind);
		return 2;
	}
	/* a message of any kind above: every one is smaller than this */
	union {
		ProtobufCMessage base;
		Skein__Weights__Begin begin;
		Skein__Weights__Done done;
		Skein__Weights__Query query;
		Skein__Weights__EngineStatus status;
	} m;
	if (desc) desc->message_init(&m.base);
	enum { FIELDS_MAX = 64 };
	Skein__Weights__PeerFailure fails[FIELDS_MAX], *failp[FIELDS_MAX];
	char *fail_text[FIELDS_MAX];
	void *keep[FIELDS_MAX] = { 0 };
	size_t nfail = 0, nkeep = 0, nargs = 1;
	agent_rpc_cred cred = { .kr = NULL, .sender = "" };
	Skein__Control__Request q = SKEIN__CONTROL__REQUEST__INIT;
	ProtobufCBinaryData raw = { 0, NULL };
	int rc = 2;
	for (int i = 5; i < argc; i++) {
		const char *eq = strchr(argv[i], '=');
		char name[64];
		if (!eq || (size_t)(eq - argv[i]) >= sizeof name || nkeep == FIELDS_MAX) goto bad;
		snprintf(name, sizeof name, "%.*s", (int)(eq - argv[i]), argv[i]);
		const char *v = eq + 1;
		if (!strcmp(name, "forwarded")) q.forwarded = strcmp(v, "0") != 0;
		else if (!strcmp(name, "sender")) cred.sender = v;
		else if (!strcmp(name, "args")) nargs = strtoul(v, NULL, 10);
		else if (!desc && !strcmp(name, "hex")) {
			free(raw.data);
			if (unhex(v, &raw.data, &raw.len) < 0) goto bad;
		} else if (desc == &skein__weights__done__descriptor && !strcmp(name, "failed")) {
			/* [!]MEMBER:REASON, a PeerFailure; ! = the receiver's own verdict */
			const char *colon = strchr(v, ':');
			if (!colon || nfail == FIELDS_MAX) goto bad;
			Skein__Weights__PeerFailure *pf = &fails[nfail];
			skein__weights__peer_failure__init(pf);
			pf->verdict = v[0] == '!';
			fail_text[nfail] = strndup(v + pf->verdict, (size_t)(colon - v) - pf->verdict);
			pf->member = fail_text[nfail];
			pf->reason = (char *)colon + 1;
			failp[nfail] = pf;
			nfail++;
		} else if (!desc || update_set(&m.base, name, v, &keep[nkeep]) < 0) {
			goto bad;
		} else if (keep[nkeep]) {
			nkeep++;
		}
		continue;
	bad:
		fprintf(stderr, "skein-forge: wv %s: cannot set %s\n", kind, argv[i]);
		goto out;
	}
	if (nfail) {
		m.done.n_failed = nfail;
		m.done.failed = failp;
	}
	if (desc) {
		raw.len = protobuf_c_message_get_packed_size(&m.base);
		raw.data = malloc(raw.len + 1);
		protobuf_c_message_pack(&m.base, raw.data);
	}
	char *args[16];
	if (nargs > 16) nargs = 16;
	for (size_t i = 0; i < nargs; i++) args[i] = (char *)verb;
	q.cmd = "wv";
	q.args = args;
	q.n_args = nargs;
	q.format = "text";
	q.payload = raw;
	uint8_t nonce[AUTH_NONCE];
	size_t len;
	uint8_t *msg = agent_req_pack(&q, &cred, ep, nonce, &len);
	if (!msg) goto out;
	Skein__Control__Response *r;
	char why[256];
	if (exchange(ep, msg, len, &cred, nonce, false, 5000, &r, why, sizeof why)) {
		printf("no answer: %s\n", why[0] ? why : "cannot reach the endpoint");
		rc = 3;
	} else {
		printf("code=%d error=%s payload=%zu", r->code, r->error, r->payload.len);
		/* a begin's answer: its nonce, for tests that play an attacker who learned it */
		Skein__Weights__BeginReply *br = NULL;
		if (desc == &skein__weights__begin__descriptor && r->code == 0 &&
		    (br = skein__weights__begin_reply__unpack(NULL, r->payload.len, r->payload.data)) && br->nonce.len) {
			printf(" nonce=");
			for (size_t i = 0; i < br->nonce.len; i++) printf("%02x", br->nonce.data[i]);
		}
		if (br) skein__weights__begin_reply__free_unpacked(br, NULL);
		printf("\n");
		skein__control__response__free_unpacked(r, NULL);
		rc = 0;
	}
	free(msg);
out:
	free(raw.data);
	for (size_t i = 0; i < nkeep; i++) free(keep[i]);
	for (size_t i = 0; i < nfail; i++) free(fail_text[i]);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: skein-forge send|replay|wv ENDPOINT ...\n");
		return 2;
	}
	if (!strcmp(argv[1], "wv")) return forge_wv(argc, argv);
	const char *mode = argv[1], *ep = argv[2];
	agent_keyring kr = { .n = 0 };
	agent_rpc_cred cred = { .kr = &kr, .sender = "" };
	Skein__Control__Request q = SKEIN__CONTROL__REQUEST__INIT;
	char *args[16];
	size_t nargs = 0;
	const char *recipient = ep, *save = NULL, *assign = NULL, *disk_dir = NULL;
	long long offset = 0;
	q.cmd = "info";
	q.format = "text";
	for (int i = !strcmp(mode, "replay") ? 4 : 3; i < argc; i++) {
		const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		char err[300];
		if (!strcmp(f, "--operator")) { cred.operator_key = true; continue; }
		if (!strcmp(f, "--oneway")) { q.oneway = 1; continue; }
		if (!v) { fprintf(stderr, "skein-forge: %s needs a value\n", f); return 2; }
		i++;
		if (!strcmp(f, "--key")) {
			agent_key k;
			if (agent_key_read_file(v, &k, err, sizeof err) < 0) { fprintf(stderr, "%s\n", err); return 2; }
			agent_keyring_add(&kr, &k, err, sizeof err);
		} else if (!strcmp(f, "--cmd")) q.cmd = (char *)v;
		else if (!strcmp(f, "--arg") && nargs < 16) args[nargs++] = (char *)v;
		else if (!strcmp(f, "--term")) q.term = strtoull(v, NULL, 10);
		else if (!strcmp(f, "--sender")) cred.sender = v;
		else if (!strcmp(f, "--recipient")) recipient = v;
		else if (!strcmp(f, "--time-offset-ms")) offset = strtoll(v, NULL, 10);
		else if (!strcmp(f, "--save")) save = v;
		else if (!strcmp(f, "--assign")) assign = v;
		else if (!strcmp(f, "--submit-disk-dir")) disk_dir = v;
		else { fprintf(stderr, "skein-forge: unknown flag %s\n", f); return 2; }
	}
	if (!strcmp(mode, "replay")) {
		const char *file = argc > 3 ? argv[3] : NULL;
		FILE *fp = file ? fopen(file, "rb") : NULL;
		if (!fp) { fprintf(stderr, "skein-forge: cannot read %s\n", file ? file : "(none)"); return 2; }
		static uint8_t buf[1 << 20];
		size_t n = fread(buf, 1, sizeof buf, fp);
		fclose(fp);
		/* the saved file is nonce (16) + request bytes */
		if (n < AUTH_NONCE + 1) return 2;
		return exchange_show(ep, buf + AUTH_NONCE, n - AUTH_NONCE, &cred, buf, false);
	}
	q.args = args;
	q.n_args = nargs;
	uint8_t *payload = NULL;
	if (disk_dir) {
		static job_spec s;
		static char *sub[] = { "submit" };
		job_spec_defaults(&s);
		snprintf(s.trainer_cmd, sizeof s.trainer_cmd, "true");
		snprintf(s.transfer_mode, sizeof s.transfer_mode, "disk-delta");
		snprintf(s.disk_dir, sizeof s.disk_dir, "%s", disk_dir);
		if (job_codec_spec_pack(&s, &payload, &q.payload.len) < 0) return 2;
		q.payload.data = payload;
		q.cmd = "job";
		q.args = sub;
		q.n_args = 1;
	}
	if (assign) {
		/* JOB/MEMBER:CMD -> an Assignment of one trainer member */
		char job[128], id[256];
		const char *colon = strchr(assign, ':'), *slash = strchr(assign, '/');
		if (!colon || !slash || slash > colon) { fprintf(stderr, "skein-forge: --assign JOB/MEMBER:CMD\n"); return 2; }
		snprintf(job, sizeof job, "%.*s", (int)(slash - assign), assign);
		snprintf(id, sizeof id, "%.*s", (int)(colon - assign), assign);
		job_order mo = { .trainer = true, .rank = 0, .engine = -1, .cmd = colon + 1, .gen = 99, .max_restarts = 1 };
		const job_order *mp = &mo;
		snprintf(mo.id, sizeof mo.id, "%s", id);
		snprintf(mo.job, sizeof mo.job, "%s", job);
		job_assignment as = { .n = 1, .members = &mp };
		snprintf(as.head, sizeof as.head, "%s", cred.sender);
		if (job_codec_assignment_encode(&as, &payload, &q.payload.len) < 0) return 2;
		q.payload.data = payload;
		if (!q.cmd || !strcmp(q.cmd, "info")) q.cmd = "assign";
	}
	uint8_t nonce[AUTH_NONCE];
	size_t len;
	/* agent_req_pack stamps the time; an offset means packing by hand */
	uint8_t *msg = agent_req_pack(&q, &cred, recipient, nonce, &len);
	if (msg && offset) {
		free(msg);
		q.time_ms = (uint64_t)((long long)sk_wall_ms() + offset);
		size_t n = skein__control__request__get_packed_size(&q);
		msg = malloc(n + CRYPTO_OVERHEAD);
		skein__control__request__pack(&q, msg);
		len = n;
		if (kr.n &&
		    agent_seal_replace(&kr.keys[0], cred.operator_key ? AGENT_RPC_AAD_OP_REQ : AGENT_RPC_AAD_REQ, &msg, &len) < 0)
			return 2;
	}
	if (!msg) return 2;
	if (save) {
		FILE *fp = fopen(save, "wb");
		if (!fp || fwrite(nonce, 1, AUTH_NONCE, fp) != AUTH_NONCE || fwrite(msg, 1, len, fp) != len) return 2;
		fclose(fp);
	}
	int rc = exchange_show(ep, msg, len, &cred, nonce, q.oneway);
	free(msg);
	free(payload);
	return rc;
}
