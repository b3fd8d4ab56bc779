/* agent/agent_http: see agent_http.h.  One state per connection: read the
 * request head, build the answer in one buffer, write it, close. */
#include "agent/agent_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/agent_wire.h"

typedef struct http_conn {
	struct agent_http *h;
	int fd;
	ev_io w;
	ev_timer t;
	char head[HTTP_HEAD_MAX + 1];
	size_t hlen;
	sk_buf out;               /* the whole answer, head and body */
	size_t off;               /* written so far */
	bool writing;
	uint64_t born;            /* accept order: the oldest idle one is shed first */
	struct http_conn *next;
} http_conn;

struct agent_http {
	struct ev_loop *loop;
	int fd;
	ev_io lw;
	ev_timer pause;           /* EMFILE: the listener rests */
	agent_http_fn fn;
	void *ctx;
	http_conn *conns;
	int nconns;
	uint64_t accepted;        /* connections accepted so far (their order) */
	agent_http_stats st;
	char addr[64];
};

static void conn_close(http_conn *c)
{
	agent_http *h = c->h;
	ev_io_stop(h->loop, &c->w);
	ev_timer_stop(h->loop, &c->t);
	close(c->fd);
	for (http_conn **p = &h->conns; *p; p = &(*p)->next)
		if (*p == c) { *p = c->next; break; }
	h->nconns--;
	sk_buf_free(&c->out);
	free(c);
}

static void conn_write(http_conn *c)
{
	while (c->off < c->out.len) {
		ssize_t k = send(c->fd, c->out.p + c->off, c->out.len - c->off, MSG_NOSIGNAL);
		if (k > 0) { c->off += (size_t)k; continue; }
		if (k < 0 && errno == EINTR) continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (!c->writing) {
				c->writing = true;
				ev_io_stop(c->h->loop, &c->w);
				ev_io_set(&c->w, c->fd, EV_WRITE);
				ev_io_start(c->h->loop, &c->w);
			}
			return;
		}
		break; /* the peer went away */
	}
	conn_close(c);
}

static void answer(http_conn *c, int status, const char *ctype, const sk_buf *body, bool head_only)
{
	const char *text = status == 200 ? "OK" : status == 400 ? "Bad Request" : status == 404 ? "Not Found"
			 : status == 405 ? "Method Not Allowed" : status == 431 ? "Request Header Fields Too Large"
			 : "Internal Server Error";
	size_t blen = body ? body->len : 0;
	sk_buf_printf(&c->out, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n",
		      status, text, ctype, blen);
	if (status == 405) sk_buf_printf(&c->out, "Allow: GET, HEAD\r\n");
	sk_buf_add(&c->out, "\r\n", 2);
	if (body && !head_only) sk_buf_add(&c->out, body->p, body->len);
	if (c->out.oom) { conn_close(c); return; }
	conn_write(c);
}

static void plain(http_conn *c, int status, const char *msg)
{
	sk_buf b;
	sk_buf_init(&b);
	sk_buf_printf(&b, "%s\n", msg);
	c->h->st.bad++;
	answer(c, status, "text/plain; charset=utf-8", &b, false);
	sk_buf_free(&b);
}

/* The head is complete in c->head: "METHOD SP TARGET SP HTTP/1.x". */
static void handle(http_conn *c)
{
	agent_http *h = c->h;
	ev_io_stop(h->loop, &c->w);
	char *eol = strstr(c->head, "\r\n");
	if (!eol) eol = strchr(c->head, '\n');
	*eol = 0;
	char *sp1 = strchr(c->head, ' ');
	char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
	if (!sp1 || !sp2 || strncmp(sp2 + 1, "HTTP/1.", 7)) { plain(c, 400, "bad request line"); return; }
	*sp1 = *sp2 = 0;
	const char *method = c->head;
	char *target = sp1 + 1;
	bool head_only = !strcmp(method, "HEAD");
	if (strcmp(method, "GET") && !head_only) { plain(c, 405, "only GET"); return; }
	char *q = strchr(target, '?');
	if (q) *q = 0;
	h->st.requests++;
	sk_buf body;
	sk_buf_init(&body);
	const char *ctype = "text/plain; charset=utf-8";
	int status = target[0] == '/' ? h->fn(h->ctx, target, &body, &ctype) : 400;
	if (body.oom) status = 500;
	if (status != 200) {
		h->st.bad++;
		body.len = 0;
		body.oom = false;
		sk_buf_printf(&body, "%s\n", status == 404 ? "not found (try /metrics)" : "error");
	}
	answer(c, status, ctype, &body, head_only);
	sk_buf_free(&body);
}

static void conn_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	http_conn *c = w->data;
	(void)loop;
	if (c->writing) {
		if (revents & EV_WRITE) conn_write(c);
		return;
	}
	for (;;) {
		if (c->hlen >= HTTP_HEAD_MAX) { plain(c, 431, "request head too large"); return; }
		ssize_t k = recv(c->fd, c->head + c->hlen, HTTP_HEAD_MAX - c->hlen, 0);
		if (k < 0 && errno == EINTR) continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
		if (k <= 0) { conn_close(c); return; }
		c->hlen += (size_t)k;
		c->head[c->hlen] = 0;
		if (memchr(c->head, 0, c->hlen)) { plain(c, 400, "NUL in request"); return; }
		if (strstr(c->head, "\r\n\r\n") || strstr(c->head, "\n\n")) { handle(c); return; }
	}
}

static void conn_timeout_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	http_conn *c = t->data;
	(void)loop; (void)revents;
	c->h->st.timeouts++;
	conn_close(c);
}

static void pause_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	agent_http *h = t->data;
	(void)revents;
	ev_io_start(loop, &h->lw);
}

static void accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	agent_http *h = w->data;
	(void)revents;
	for (int n = 0; n < 64; n++) {
		int fd = accept4(h->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE) {
				ev_io_stop(loop, &h->lw);
				ev_timer_set(&h->pause, 0.1, 0);
				ev_timer_start(loop, &h->pause);
			}
			return;
		}
		if (h->nconns >= HTTP_CONNS_MAX) {
			/* full: the oldest connection still waiting for its request
			 * head goes, so idle ones cannot lock a scraper out */
			http_conn *old = NULL;
			for (http_conn *o = h->conns; o; o = o->next)
				if (!o->writing && (!old || o->born <= old->born)) old = o;
			if (old) {
				h->st.shed_idle++;
				conn_close(old);
			}
		}
		http_conn *c = h->nconns < HTTP_CONNS_MAX ? calloc(1, sizeof *c) : NULL;
		if (!c) {
			h->st.refused_cap++;
			close(fd);
			continue;
		}
		c->h = h;
		c->fd = fd;
		c->born = ++h->accepted;
		sk_buf_init(&c->out);
		ev_io_init(&c->w, conn_cb, fd, EV_READ);
		c->w.data = c;
		ev_timer_init(&c->t, conn_timeout_cb, HTTP_CONN_MS / 1000.0, 0);
		c->t.data = c;
		ev_io_start(loop, &c->w);
		ev_timer_start(loop, &c->t);
		c->next = h->conns;
		h->conns = c;
		h->nconns++;
	}
}

agent_http *agent_http_new(struct ev_loop *loop, const char *addr, agent_http_fn fn, void *ctx, char *err,
			   size_t errlen)
{
	struct sockaddr_storage ss;
	unsigned sl;
	if (agent_wire_parse_addr(addr, &ss, &sl) < 0) {
		snprintf(err, errlen, "--metrics: expected IP:PORT, got '%s'", addr);
		return NULL;
	}
	agent_http *h = calloc(1, sizeof *h);
	if (!h) { snprintf(err, errlen, "out of memory"); return NULL; }
	h->loop = loop;
	h->fn = fn;
	h->ctx = ctx;
	h->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	if (h->fd >= 0) setsockopt(h->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	socklen_t bl = sizeof ss;
	if (h->fd < 0 || bind(h->fd, (struct sockaddr *)&ss, sl) < 0 || listen(h->fd, 64) < 0 ||
	    getsockname(h->fd, (struct sockaddr *)&ss, &bl) < 0) {
		snprintf(err, errlen, "cannot listen for metrics on %s: %s", addr, strerror(errno));
		if (h->fd >= 0) close(h->fd);
		free(h);
		return NULL;
	}
	char ip[INET6_ADDRSTRLEN] = "?";
	unsigned port;
	if (ss.ss_family == AF_INET6) {
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, ip, sizeof ip);
		port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
		snprintf(h->addr, sizeof h->addr, "[%s]:%u", ip, port);
	} else {
		inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, ip, sizeof ip);
		port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		snprintf(h->addr, sizeof h->addr, "%s:%u", ip, port);
	}
	ev_io_init(&h->lw, accept_cb, h->fd, EV_READ);
	h->lw.data = h;
	ev_init(&h->pause, pause_cb);
	h->pause.data = h;
	ev_io_start(loop, &h->lw);
	return h;
}

void agent_http_free(agent_http **hp)
{
	agent_http *h = *hp;
	if (!h) return;
	while (h->conns) conn_close(h->conns);
	ev_io_stop(h->loop, &h->lw);
	ev_timer_stop(h->loop, &h->pause);
	close(h->fd);
	free(h);
	*hp = NULL;
}

const agent_http_stats *agent_http_get_stats(const agent_http *h)
{
	return &h->st;
}

const char *agent_http_addr(const agent_http *h)
{
	return h->addr;
}
