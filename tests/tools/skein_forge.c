/* tests/tools/skein_forge: crafts control requests as an attacker would, for
 * tests/agent/auth_test.sh.  Not installed; not part of skein.
 *
 *   skein-forge send ENDPOINT [--key FILE [--operator]] [--cmd CMD] [--arg A]...
 *        [--term T] [--sender S] [--recipient R] [--time-offset-ms N]
 *        [--assign JOB/MEMBER:CMD] [--oneway] [--save FILE]
 *     builds one request (sealed when --key is given, addressed to R, by
 *     default the endpoint), sends it, saves the exact bytes sent with
 *     --save, and prints the answer: "code N: error" and the body.
 *   skein-forge replay ENDPOINT FILE [--key FILE [--operator]]
 *     sends saved bytes again, unchanged, and prints the answer.
 * Exit status: the answer's code; 3 when no answer came. */
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
#include "proto/control.pb-c.h"

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
		if (wire_parse_addr(ep, &ss, &sl) < 0) return -1;
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

/* Sends one frame, waits up to 3 s for one frame back. */
static int exchange(const char *ep, const uint8_t *msg, size_t len, const agent_rpc_cred *cred,
		    const uint8_t *nonce, bool oneway)
{
	int fd = dial(ep);
	if (fd < 0) return 3;
	uint32_t be = htonl((uint32_t)len);
	if (send_all(fd, (uint8_t *)&be, 4) < 0 || send_all(fd, msg, len) < 0) { close(fd); return 3; }
	if (oneway) {
		/* nothing answers; give the agent a moment to read it */
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		poll(&pf, 1, 300);
		close(fd);
		printf("sent (one-way)\n");
		return 0;
	}
	uint8_t hdr[4];
	size_t got = 0;
	uint8_t *body = NULL;
	size_t want = 0;
	for (;;) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		if (poll(&pf, 1, 3000) <= 0) break;
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
		printf("no answer (the agent closed the connection)\n");
		free(body);
		return 3;
	}
	char why[256];
	Skein__Control__Response *r = agent_resp_open(body, want, cred, nonce, why, sizeof why);
	free(body);
	if (!r) {
		printf("unreadable answer: %s\n", why);
		return 3;
	}
	printf("code %d: %s\n%s", r->code, r->error, r->body);
	int code = r->code;
	skein__control__response__free_unpacked(r, NULL);
	return code;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: skein-forge send|replay ENDPOINT ...\n");
		return 2;
	}
	const char *mode = argv[1], *ep = argv[2];
	agent_keyring kr = { .n = 0 };
	agent_rpc_cred cred = { .kr = &kr, .sender = "" };
	Skein__Control__Request q = SKEIN__CONTROL__REQUEST__INIT;
	char *args[16];
	size_t nargs = 0;
	const char *recipient = ep, *save = NULL, *assign = NULL;
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
		return exchange(ep, buf + AUTH_NONCE, n - AUTH_NONCE, &cred, buf, false);
	}
	q.args = args;
	q.n_args = nargs;
	uint8_t *payload = NULL;
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
	int rc = exchange(ep, msg, len, &cred, nonce, q.oneway);
	free(msg);
	free(payload);
	return rc;
}
