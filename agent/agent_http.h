/* agent/agent_http: a tiny read-only HTTP/1.x server on the agent's libev
 * loop, for GET /metrics (agent_metrics.c).
 *
 * Why not libmicrohttpd: it would bring its own threads (or a select loop to
 * graft onto libev), a second HTTP parser and one more runtime library in
 * every image, for one GET per scrape.  What a scraper needs fits here, with
 * every resource bounded before a byte is trusted:
 *   - one request per connection, answered with "Connection: close";
 *   - the request head (request line and headers) at most HTTP_HEAD_MAX
 *     bytes, else 431; a body is never read;
 *   - a connection must send its whole head and take its whole answer
 *     within HTTP_CONN_MS, else it is closed (slow clients);
 *   - at most HTTP_CONNS_MAX connections at once; one more sheds the
 *     oldest that has not sent its whole request head yet (idle or slow:
 *     counted), so idle connections cannot keep a scrape out, and is
 *     closed at once (counted) only when all of them are being answered;
 *   - out of descriptors (EMFILE), the listener pauses for 100 ms instead
 *     of spinning on a socket that stays readable.
 * Only GET (and HEAD) of the paths the handler knows; anything else is
 * answered 404/405/400 and counted. */
#ifndef AGENT_HTTP_H
#define AGENT_HTTP_H

#include <ev.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sk_buf.h"

enum {
	HTTP_HEAD_MAX = 4096,
	HTTP_CONNS_MAX = 16,      /* a scraper or two, and curl by hand */
	HTTP_CONN_MS = 5000,      /* Prometheus's default scrape timeout is 10 s */
};

typedef struct {
	uint64_t requests, bad, refused_cap, timeouts, shed_idle;
} agent_http_stats;

typedef struct agent_http agent_http;

/* Fills `body` for a GET of `path` (query string removed) and returns the
 * HTTP status (200, or 404 for an unknown path); *ctype is the content type. */
typedef int (*agent_http_fn)(void *ctx, const char *path, sk_buf *body, const char **ctype);

/* Listens on "IP:PORT"; NULL with a message. */
agent_http *agent_http_new(struct ev_loop *loop, const char *addr, agent_http_fn fn, void *ctx, char *err,
			   size_t errlen);
/* Closes the listener and every connection; sets *h to NULL (safe twice). */
void agent_http_free(agent_http **h);
const agent_http_stats *agent_http_get_stats(const agent_http *h);
/* The address bound ("IP:PORT": the real port when PORT was 0). */
const char *agent_http_addr(const agent_http *h);

#endif
