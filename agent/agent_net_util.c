/* agent/agent_net_util: what both gossip transports use, agent_net.c (UDP)
 * and agent_tcp.c (streams): addresses to and from sockaddr, and opening a
 * sealed payload.  A leaf below both, so that neither calls the other back. */
#include "agent/agent.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

void agent_net_to_sockaddr(const mbr_addr *a, struct sockaddr_storage *ss, socklen_t *sl)
{
	memset(ss, 0, sizeof *ss);
	if (a->len == 4) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(a->port);
		memcpy(&s->sin_addr, a->ip, 4);
		*sl = sizeof *s;
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(a->port);
		memcpy(&s->sin6_addr, a->ip, 16);
		*sl = sizeof *s;
	}
}

void agent_net_from_sockaddr(const struct sockaddr_storage *ss, mbr_addr *a)
{
	memset(a, 0, sizeof *a);
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)ss;
		a->len = 4;
		memcpy(a->ip, &s->sin_addr, 4);
		a->port = ntohs(s->sin_port);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)ss;
		a->len = 16;
		memcpy(a->ip, &s->sin6_addr, 16);
		a->port = ntohs(s->sin6_port);
	}
}

const uint8_t *agent_net_unseal(agent *a, const char *aad, const uint8_t *in, size_t n,
				uint8_t *scratch, size_t *outlen)
{
	if (agent_keyless_closed(a)) {
		a->cnt.drop_keyless++;
		return NULL;
	}
	if (a->kr.n == 0) {
		if (n > 0 && in[0] == CRYPTO_VERSION) {
			a->cnt.drop_plain++;
			return NULL;
		}
		*outlen = n;
		return in;
	}
	if (agent_open(&a->kr, aad, in, n, scratch, outlen) < 0) {
		a->cnt.drop_auth++;
		return NULL;
	}
	return scratch;
}
