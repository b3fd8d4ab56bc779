/* transfer/core/xfer_env.c: xfer_config_from_env, a member's endpoint from the
 * environment its agent set (agent/agent_jobs.c aj_build_order), so that a
 * trainer or engine inside a job names no address, port, folder or rank.
 *
 * Every variable that is set is checked; a bad one is a one-line error that
 * names it.  Strings point into the environment (xfer_open copies them). */
#include "transfer/core/xfer_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

static const char *env(const char *name)
{
	const char *v = getenv(name);
	return v && *v ? v : NULL;
}

/* A decimal number in [lo, hi], digits only. */
static int env_u64(const char *name, uint64_t lo, uint64_t hi, uint64_t *out, xfer_err *err)
{
	const char *v = env(name);
	if (!v) return 1;
	char *end;
	errno = 0;
	unsigned long long x = strtoull(v, &end, 10);
	if (*v < '0' || *v > '9' || *end || errno || x < lo || x > hi)
		return xfer_fail(err, XFER_EINVAL, "%s=\"%.64s\": not a number in %llu..%llu", name, v,
				 (unsigned long long)lo, (unsigned long long)hi);
	*out = x;
	return 0;
}

int xfer_config_from_env(xfer_config *c, xfer_role role, xfer_err *err)
{
	xfer_config_init(c);
	c->role = role;
	const char *job = env("SKEIN_JOB"), *v;
	if (!job) return xfer_fail(err, XFER_EINVAL, "not inside a skein job (SKEIN_JOB is unset)");
	if ((v = env("SKEIN_TRANSFER_MODE"))) {
		const char *const *names = xfer_path_names();
		while (*names && strcmp(*names, v) != 0) names++;
		if (!*names)
			return xfer_fail(err, XFER_EINVAL, "SKEIN_TRANSFER_MODE=\"%.64s\": not a data path (disk-delta, p2p, "
					 "p2p-tcp, p2p-ucx, broadcast, broadcast_packed, colocated)", v);
		c->path = v;
	}
	uint64_t x;
	int rc;
	if ((rc = env_u64("SKEIN_BUFFER_SIZE", 1, UINT64_MAX, &x, err)) < 0) return -1;
	if (rc == 0) c->bucket_bytes = x;
	if ((rc = env_u64("SKEIN_UPDATE_TIMEOUT_MS", 1, 24ull * 3600 * 1000, &x, err)) < 0) return -1;
	if (rc == 0) c->timeout_ms = (int)x;
	if ((rc = env_u64("SKEIN_GENERATION", 0, UINT64_MAX, &x, err)) < 0) return -1;
	if (rc == 0) c->coord.generation = x;
	c->disk.dir = env("SKEIN_DISK_DIR");
	if ((v = env("SKEIN_NODE_ADDR"))) {
		struct in_addr a;
		if (inet_pton(AF_INET, v, &a) != 1)
			return xfer_fail(err, XFER_EINVAL, "SKEIN_NODE_ADDR=\"%.64s\": not an IPv4 address", v);
		c->p2p.host = v;
	}
	c->p2p.port = 0;
	if ((v = getenv("SKEIN_COORDINATE")) && !strcmp(v, "0")) return 0; /* the job's config, uncoordinated */
	const char *rpc = env("SKEIN_RPC"), *member = env("SKEIN_MEMBER");
	char path[128];
	if (!rpc) return xfer_fail(err, XFER_EINVAL, "SKEIN_JOB is set but SKEIN_RPC is not: the agent's socket is needed");
	if (xfer_rpc_parse(rpc, path, sizeof path, err) != 0) return -1;
	if (!member) return xfer_fail(err, XFER_EINVAL, "SKEIN_JOB is set but SKEIN_MEMBER is not");
	if (strlen(member) >= XFER_UPD_STR)
		return xfer_fail(err, XFER_EINVAL, "SKEIN_MEMBER: %zu bytes (at most %d)", strlen(member), XFER_UPD_STR - 1);
	c->coord.rpc = rpc;
	c->coord.job = job;
	c->coord.member = member;
	c->disk.receiver_id = member; /* its '/' become '-' in receivers/ (xfer_open) */
	return 0;
}

int xfer_rpc_parse(const char *rpc, char *path, size_t n, xfer_err *err)
{
	if (!rpc || strncmp(rpc, "unix:", 5) != 0 || !rpc[5])
		return xfer_fail(err, XFER_EINVAL, "SKEIN_RPC \"%.200s\": libskein speaks to its agent on unix:PATH",
				 rpc ? rpc : "(null)");
	if (strlen(rpc + 5) >= n || strlen(rpc + 5) >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return xfer_fail(err, XFER_EINVAL, "SKEIN_RPC: the socket path is too long (%zu bytes)", strlen(rpc + 5));
	snprintf(path, n, "%s", rpc + 5);
	return 0;
}
