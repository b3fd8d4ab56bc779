/* agent/agent_wire: see agent_wire.h. */
#include "common/sk_time.h"
#include "agent/agent_wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

enum { K_IN, K_PEER, K_CALL };
enum { LISTEN_MAX = 4, ACCEPT_BATCH = 64, READ_BATCH = 1 << 20, BACKPRESSURE = 1 << 20 };

typedef struct {
	agent_wire_id id;
	int fd;
	uint8_t kind;
	bool trusted, connecting, frames;  /* frames: delivered at least one */
	agent_wire_peer peer;
	char src[48];                       /* the source address without the port */
	ev_io rio, wio;
	uint8_t hdr[4];
	uint32_t hgot;
	uint8_t *in;
	size_t want, got, cap;
	uint8_t *out;
	size_t olen, ooff, ocap;
	uint64_t opened, last;
	void *cookie;
	struct agent_wire *w;
} conn;

struct agent_wire {
	struct ev_loop *loop;
	void *ctx;
	agent_wire_request_fn on_request;
	agent_wire_answer_fn on_answer;
	conn *slots[WIRE_CONNS_MAX];
	uint64_t gen;
	int nconns;
	struct { int fd; ev_io io; agent_wire_transport t; char path[108]; } ls[LISTEN_MAX];
	int nls;
	int reserve_fd;
	size_t untrusted_bytes;
	ev_timer sweep;
	agent_wire_stats st;
};


static conn *lookup(agent_wire *w, agent_wire_id id)
{
	if (!w || !id) return NULL;
	conn *c = w->slots[id & 0xffff];
	return c && c->id == id ? c : NULL;
}

static void conn_free(agent_wire *w, conn *c)
{
	ev_io_stop(w->loop, &c->rio);
	ev_io_stop(w->loop, &c->wio);
	if (c->fd >= 0) close(c->fd);
	if (!c->trusted && c->kind == K_IN) w->untrusted_bytes -= c->cap;
	w->slots[c->id & 0xffff] = NULL;
	w->nconns--;
	free(c->in);
	free(c->out);
	free(c);
}

/* Closes a connection; an outbound call that had no answer learns why. */
static void conn_fail(agent_wire *w, conn *c, const char *why)
{
	if (c->kind == K_CALL && w->on_answer) {
		void *cookie = c->cookie;
		conn_free(w, c);
		w->on_answer(w->ctx, cookie, NULL, 0, why);
		return;
	}
	conn_free(w, c);
}

static void read_cb(struct ev_loop *loop, ev_io *io, int revents);
static void write_cb(struct ev_loop *loop, ev_io *io, int revents);

static conn *conn_new(agent_wire *w, int fd, uint8_t kind)
{
	if (w->nconns >= WIRE_CONNS_MAX) return NULL;
	int slot = -1;
	for (int i = 0; i < WIRE_CONNS_MAX; i++) {
		/* start after the last id's slot so slots (and ids) rotate */
		int s = (int)((w->gen + 1 + (uint64_t)i) % WIRE_CONNS_MAX);
		if (!w->slots[s]) { slot = s; break; }
	}
	conn *c = slot >= 0 ? calloc(1, sizeof *c) : NULL;
	if (!c) return NULL;
	w->gen++;
	c->id = (w->gen << 16) | (uint64_t)slot;
	c->fd = fd;
	c->kind = kind;
	c->w = w;
	c->opened = c->last = sk_mono_ms();
	ev_io_init(&c->rio, read_cb, fd, EV_READ);
	ev_io_init(&c->wio, write_cb, fd, EV_WRITE);
	c->rio.data = c->wio.data = c;
	w->slots[slot] = c;
	w->nconns++;
	return c;
}

/* ---- sending ---- */

static void flush(agent_wire *w, conn *c)
{
	while (c->ooff < c->olen && !c->connecting) {
		ssize_t n = send(c->fd, c->out + c->ooff, c->olen - c->ooff, MSG_NOSIGNAL);
		if (n > 0) { c->ooff += (size_t)n; continue; }
		if (n < 0 && errno == EINTR) continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
		w->st.errors++;
		conn_fail(w, c, "the connection broke while sending");
		return;
	}
	if (c->ooff == c->olen) {
		c->ooff = c->olen = 0;
		ev_io_stop(w->loop, &c->wio);
		if (c->kind == K_IN && !ev_is_active(&c->rio)) ev_io_start(w->loop, &c->rio);
	} else {
		ev_io_start(w->loop, &c->wio);
	}
}

static int queue(conn *c, const uint8_t *data, size_t len)
{
	if (len > UINT32_MAX || c->olen - c->ooff + len + 4 > WIRE_OUT_MAX) return -1;
	if (c->ooff && c->ooff == c->olen) c->ooff = c->olen = 0;
	if (c->olen + len + 4 > c->ocap) {
		if (c->ooff) { /* compact first */
			memmove(c->out, c->out + c->ooff, c->olen - c->ooff);
			c->olen -= c->ooff;
			c->ooff = 0;
		}
		size_t cap = c->ocap ? c->ocap : 4096;
		while (cap < c->olen + len + 4) cap *= 2;
		uint8_t *n = realloc(c->out, cap);
		if (!n) return -1;
		c->out = n;
		c->ocap = cap;
	}
	uint32_t be = htonl((uint32_t)len);
	memcpy(c->out + c->olen, &be, 4);
	if (len) memcpy(c->out + c->olen + 4, data, len);
	c->olen += len + 4;
	return 0;
}

int agent_wire_send(agent_wire *w, agent_wire_id id, const uint8_t *data, size_t len)
{
	conn *c = lookup(w, id);
	if (!c || queue(c, data, len) < 0) return -1;
	flush(w, c);
	return lookup(w, id) ? 0 : -1;
}

static void write_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	conn *c = io->data;
	agent_wire *w = c->w;
	(void)loop; (void)revents;
	if (c->connecting) {
		int err = 0;
		socklen_t sl = sizeof err;
		getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &sl);
		if (err) {
			char why[160];
			snprintf(why, sizeof why, "cannot connect: %s", strerror(err));
			conn_fail(w, c, why);
			return;
		}
		c->connecting = false;
		ev_io_start(w->loop, &c->rio);
	}
	flush(w, c);
}

/* ---- receiving ---- */

static size_t frame_cap(const conn *c)
{
	return c->kind == K_IN ? WIRE_FRAME_MAX : c->kind == K_CALL ? WIRE_ANSWER_MAX : 4096;
}

/* Frees room in the untrusted budget by closing the untrusted connection
 * holding the most bytes; true when `self` was the one closed. */
static bool shed_biggest(agent_wire *w, conn *self)
{
	conn *big = NULL;
	for (int i = 0; i < WIRE_CONNS_MAX; i++) {
		conn *c = w->slots[i];
		if (c && c->kind == K_IN && !c->trusted && (!big || c->cap > big->cap)) big = c;
	}
	if (!big) return false;
	bool me = big == self;
	w->st.shed_bytes++;
	conn_free(w, big);
	return me;
}

/* Grows the frame buffer for `more` bytes; false when the connection was
 * closed for it. */
static bool grow(agent_wire *w, conn *c, size_t more)
{
	if (c->got + more <= c->cap) return true;
	size_t cap = c->cap ? c->cap : 16384;
	while (cap < c->got + more) cap *= 2;
	if (cap > c->want) cap = c->want;
	bool untrusted = c->kind == K_IN && !c->trusted;
	while (untrusted && w->untrusted_bytes - c->cap + cap > WIRE_UNTRUSTED_BYTES)
		if (shed_biggest(w, c)) return false;
	uint8_t *n = realloc(c->in, cap);
	if (!n) { w->st.errors++; conn_fail(w, c, "out of memory"); return false; }
	if (untrusted) w->untrusted_bytes += cap - c->cap;
	c->in = n;
	c->cap = cap;
	return true;
}

static void deliver(agent_wire *w, conn *c)
{
	uint8_t *data = c->in;
	size_t len = c->got;
	if (c->kind == K_IN && !c->trusted) w->untrusted_bytes -= c->cap;
	c->in = NULL;
	c->got = c->cap = c->want = 0;
	c->hgot = 0;
	c->last = sk_mono_ms();
	c->frames = true;
	if (c->kind == K_IN) {
		/* answers queue up unread: stop reading until they drain */
		if (c->olen - c->ooff > BACKPRESSURE) ev_io_stop(w->loop, &c->rio);
		w->on_request(w->ctx, c->id, &c->peer, data, len);
	} else if (c->kind == K_CALL) {
		void *cookie = c->cookie;
		conn_free(w, c);
		w->on_answer(w->ctx, cookie, data, len, NULL);
	} else {
		free(data); /* nothing answers a one-way frame */
	}
}

static void read_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	conn *c = io->data;
	agent_wire *w = c->w;
	agent_wire_id id = c->id;
	(void)loop; (void)revents;
	size_t budget = READ_BATCH;
	while (budget > 0 && (c = lookup(w, id)) != NULL) {
		if (c->kind == K_IN && c->olen - c->ooff > BACKPRESSURE) { ev_io_stop(w->loop, &c->rio); return; }
		ssize_t n;
		if (c->hgot < 4) {
			n = recv(c->fd, c->hdr + c->hgot, 4 - c->hgot, 0);
			if (n > 0) {
				c->hgot += (uint32_t)n;
				if (c->hgot == 4) {
					uint32_t be;
					memcpy(&be, c->hdr, 4);
					c->want = ntohl(be);
					if (c->want == 0 || c->want > frame_cap(c)) {
						w->st.oversize++;
						conn_fail(w, c, "the answer is over the size limit");
						return;
					}
				}
				continue;
			}
		} else {
			size_t chunk = c->want - c->got;
			if (chunk > 65536) chunk = 65536;
			if (!grow(w, c, chunk)) return;
			n = recv(c->fd, c->in + c->got, chunk, 0);
			if (n > 0) {
				c->got += (size_t)n;
				budget -= (size_t)n < budget ? (size_t)n : budget;
				if (c->got == c->want) deliver(w, c);
				continue;
			}
		}
		if (n < 0 && errno == EINTR) continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
		conn_fail(w, c, n == 0 ? "the peer closed the connection" : "the connection broke");
		return;
	}
}

/* ---- accepting ---- */

static void addr_text(const struct sockaddr_storage *ss, char *out, size_t cap, char *src, size_t scap)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
		inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
		port = ntohs(s4->sin_port);
		snprintf(out, cap, "%s:%u", ip, port);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
		inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
		port = ntohs(s6->sin6_port);
		snprintf(out, cap, "[%s]:%u", ip, port);
	} else {
		snprintf(ip, sizeof ip, "unix");
		snprintf(out, cap, "unix");
	}
	snprintf(src, scap, "%s", ip);
}

/* Makes room for one more untrusted connection from `src`: sheds the
 * oldest untrusted one of that source (per-source cap) or of all (total cap). */
static bool make_room(agent_wire *w, const char *src)
{
	int per = 0, all = 0;
	conn *old_src = NULL, *old_all = NULL;
	for (int i = 0; i < WIRE_CONNS_MAX; i++) {
		conn *c = w->slots[i];
		if (!c || c->kind != K_IN || c->trusted) continue;
		all++;
		if (!old_all || c->last < old_all->last) old_all = c;
		if (!strcmp(c->src, src)) {
			per++;
			if (!old_src || c->last < old_src->last) old_src = c;
		}
	}
	conn *victim = per >= WIRE_UNTRUSTED_PER_SOURCE ? old_src : all >= WIRE_UNTRUSTED_MAX ? old_all : NULL;
	if (!victim && w->nconns >= WIRE_CONNS_MAX) victim = old_all;
	if (victim) { w->st.shed_idle++; conn_free(w, victim); }
	return w->nconns < WIRE_CONNS_MAX;
}

static void peer_cred(int fd, agent_wire_peer *p)
{
	struct ucred uc;
	socklen_t sl = sizeof uc;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &sl) == 0) {
		p->cred = true;
		p->uid = uc.uid;
		p->gid = uc.gid;
		p->pid = uc.pid;
	}
#ifdef SO_PEERGROUPS
	socklen_t gl = sizeof p->groups;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, p->groups, &gl) == 0) p->ngroups = (int)(gl / sizeof(gid_t));
#endif
}

static void accept_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	agent_wire *w = io->data;
	int li = 0;
	(void)loop; (void)revents;
	for (int i = 0; i < LISTEN_MAX; i++)
		if (&w->ls[i].io == io) li = i;
	for (int k = 0; k < ACCEPT_BATCH; k++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof ss;
		int fd = accept4(w->ls[li].fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED) continue;
			if ((errno == EMFILE || errno == ENFILE) && w->reserve_fd >= 0) {
				/* out of descriptors: use the reserve to take the
				 * connection off the queue and close it, so the listening
				 * socket does not stay readable (a busy loop) */
				w->st.emfile++;
				close(w->reserve_fd);
				int x = accept(w->ls[li].fd, NULL, NULL);
				if (x >= 0) close(x);
				w->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
				continue;
			}
			return;
		}
		char addr[64], src[48];
		if (w->ls[li].t == WIRE_UNIX) ss.ss_family = AF_UNIX;
		addr_text(&ss, addr, sizeof addr, src, sizeof src);
		if (!make_room(w, src)) { w->st.refused_cap++; close(fd); continue; }
		conn *c = conn_new(w, fd, K_IN);
		if (!c) { w->st.refused_cap++; close(fd); continue; }
		w->st.accepted++;
		c->peer.transport = w->ls[li].t;
		snprintf(c->peer.addr, sizeof c->peer.addr, "%s", addr);
		snprintf(c->src, sizeof c->src, "%s", src);
		struct sockaddr_storage ls;
		socklen_t lsl = sizeof ls;
		if (c->peer.transport == WIRE_TCP && getsockname(fd, (struct sockaddr *)&ls, &lsl) == 0) {
			char lsrc[48];
			addr_text(&ls, c->peer.local, sizeof c->peer.local, lsrc, sizeof lsrc);
		}
		if (c->peer.transport == WIRE_UNIX) peer_cred(fd, &c->peer);
		else { int one = 1; setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); }
		ev_io_start(w->loop, &c->rio);
	}
}

/* ---- timeouts ---- */

static void sweep_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	agent_wire *w = t->data;
	(void)loop; (void)revents;
	uint64_t now = sk_mono_ms();
	for (int i = 0; i < WIRE_CONNS_MAX; i++) {
		conn *c = w->slots[i];
		if (!c) continue;
		bool late = false;
		if (c->connecting || (c->kind == K_CALL))
			late = now - c->opened > (c->connecting ? 5000u : (uint64_t)WIRE_IDLE_MS);
		else if (c->kind == K_IN && !c->trusted)
			late = now - c->last > WIRE_FIRST_FRAME_MS;
		else
			late = now - c->last > WIRE_IDLE_MS && c->olen == c->ooff;
		if (late) { w->st.timeouts++; conn_fail(w, c, "timed out"); }
	}
}

/* ---- set-up ---- */

agent_wire *agent_wire_new(struct ev_loop *loop, void *ctx, agent_wire_request_fn on_request, agent_wire_answer_fn on_answer)
{
	agent_wire *w = calloc(1, sizeof *w);
	if (!w) return NULL;
	w->loop = loop;
	w->ctx = ctx;
	w->on_request = on_request;
	w->on_answer = on_answer;
	w->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	ev_timer_init(&w->sweep, sweep_cb, 1.0, 1.0);
	w->sweep.data = w;
	ev_timer_start(loop, &w->sweep);
	ev_unref(loop); /* the sweep alone does not keep the loop running */
	return w;
}

void agent_wire_free(agent_wire *w)
{
	if (!w) return;
	for (int i = 0; i < WIRE_CONNS_MAX; i++)
		if (w->slots[i]) conn_free(w, w->slots[i]);
	for (int i = 0; i < w->nls; i++) {
		ev_io_stop(w->loop, &w->ls[i].io);
		close(w->ls[i].fd);
		if (w->ls[i].t == WIRE_UNIX) unlink(w->ls[i].path);
	}
	ev_ref(w->loop);
	ev_timer_stop(w->loop, &w->sweep);
	if (w->reserve_fd >= 0) close(w->reserve_fd);
	free(w);
}

int agent_wire_parse_addr(const char *addr, struct sockaddr_storage *ss, unsigned *sslen)
{
	char host[80];
	const char *colon = strrchr(addr, ':');
	if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof host) return -1;
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = 0;
	char *end;
	unsigned long port = strtoul(colon + 1, &end, 10);
	if (*end || end == colon + 1 || port > 65535) return -1;
	memset(ss, 0, sizeof *ss);
	size_t hl = strlen(host);
	if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
		host[hl - 1] = 0;
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
		if (inet_pton(AF_INET6, host + 1, &s6->sin6_addr) != 1) return -1;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		*sslen = sizeof *s6;
		return 0;
	}
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	if (inet_pton(AF_INET, host, &s4->sin_addr) != 1) return -1;
	s4->sin_family = AF_INET;
	s4->sin_port = htons((uint16_t)port);
	*sslen = sizeof *s4;
	return 0;
}

static int listen_add(agent_wire *w, int fd, agent_wire_transport t, const char *path)
{
	int i = w->nls++;
	w->ls[i].fd = fd;
	w->ls[i].t = t;
	snprintf(w->ls[i].path, sizeof w->ls[i].path, "%s", path ? path : "");
	ev_io_init(&w->ls[i].io, accept_cb, fd, EV_READ);
	w->ls[i].io.data = w;
	ev_io_start(w->loop, &w->ls[i].io);
	return 0;
}

int agent_wire_listen_tcp(agent_wire *w, const char *addr, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	unsigned sl;
	if (w->nls >= LISTEN_MAX) { snprintf(err, errlen, "too many control endpoints"); return -1; }
	if (agent_wire_parse_addr(addr, &ss, &sl) < 0) {
		snprintf(err, errlen, "control endpoint: expected IP:PORT, got '%s'", addr);
		return -1;
	}
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (fd < 0 || bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 512) < 0) {
		snprintf(err, errlen, "cannot bind the control endpoint %s: %s", addr, strerror(errno));
		if (fd >= 0) close(fd);
		return -1;
	}
	return listen_add(w, fd, WIRE_TCP, NULL);
}

int agent_wire_listen_unix(agent_wire *w, const char *path, mode_t mode, gid_t group, char *err, size_t errlen)
{
	struct sockaddr_un su = { .sun_family = AF_UNIX };
	if (w->nls >= LISTEN_MAX) { snprintf(err, errlen, "too many control endpoints"); return -1; }
	if (strlen(path) >= sizeof su.sun_path) {
		snprintf(err, errlen, "control socket path is longer than %zu bytes: %s", sizeof su.sun_path - 1, path);
		return -1;
	}
	snprintf(su.sun_path, sizeof su.sun_path, "%s", path);
	struct stat st;
	if (lstat(path, &st) == 0) {
		/* a socket left by an earlier run goes; anything else is not ours to remove */
		if (!S_ISSOCK(st.st_mode) || st.st_uid != geteuid()) {
			snprintf(err, errlen, "control socket %s exists and is not a socket of ours: remove it", path);
			return -1;
		}
		unlink(path);
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	mode_t old = umask(0177); /* created 0600; chmod below widens to the group when asked */
	int rc = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&su, sizeof su);
	umask(old);
	if (rc < 0 || listen(fd, 128) < 0 || chmod(path, mode) < 0 ||
	    (group != (gid_t)-1 && chown(path, (uid_t)-1, group) < 0)) {
		snprintf(err, errlen, "cannot open the control socket %s: %s", path, strerror(errno));
		if (fd >= 0) close(fd);
		return -1;
	}
	return listen_add(w, fd, WIRE_UNIX, path);
}

/* ---- outbound ---- */

static conn *dial(agent_wire *w, const char *addr, uint8_t kind)
{
	struct sockaddr_storage ss;
	unsigned sl;
	if (agent_wire_parse_addr(addr, &ss, &sl) < 0) return NULL;
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) return NULL;
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	int rc = connect(fd, (struct sockaddr *)&ss, sl);
	if (rc < 0 && errno != EINPROGRESS) { close(fd); return NULL; }
	conn *c = conn_new(w, fd, kind);
	if (!c) { close(fd); return NULL; }
	c->trusted = true; /* ours */
	snprintf(c->peer.addr, sizeof c->peer.addr, "%s", addr);
	/* the first write happens in the loop (write_cb), never here: a caller
	 * must not get a failure callback before agent_wire_call has returned */
	c->connecting = rc < 0;
	ev_io_start(w->loop, &c->wio);
	if (!c->connecting) ev_io_start(w->loop, &c->rio);
	return c;
}

agent_wire_id agent_wire_connect(agent_wire *w, const char *addr)
{
	conn *c = dial(w, addr, K_PEER);
	return c ? c->id : 0;
}

agent_wire_id agent_wire_call(agent_wire *w, const char *addr, const uint8_t *data, size_t len, void *cookie)
{
	conn *c = dial(w, addr, K_CALL);
	if (!c) return 0;
	c->cookie = cookie;
	if (queue(c, data, len) < 0) { conn_free(w, c); return 0; }
	return c->id;
}

void agent_wire_trust(agent_wire *w, agent_wire_id id)
{
	conn *c = lookup(w, id);
	if (!c || c->trusted) return;
	w->untrusted_bytes -= c->cap;
	c->trusted = true;
}

void agent_wire_close(agent_wire *w, agent_wire_id id)
{
	conn *c = lookup(w, id);
	if (c) conn_free(w, c);
}

bool agent_wire_alive(agent_wire *w, agent_wire_id id)
{
	return lookup(w, id) != NULL;
}

const agent_wire_stats *agent_wire_get_stats(const agent_wire *w)
{
	return &w->st;
}

int agent_wire_count(const agent_wire *w, bool untrusted_only)
{
	if (!untrusted_only) return w->nconns;
	int n = 0;
	for (int i = 0; i < WIRE_CONNS_MAX; i++)
		if (w->slots[i] && w->slots[i]->kind == K_IN && !w->slots[i]->trusted) n++;
	return n;
}
