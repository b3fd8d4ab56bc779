/* eng_zmq: the few libzmq calls checkpoint-engine's weight protocol needs
 * (docs/engines.md), exported from libskein for the engine sidecar
 * (python/skein/sidecar.py) and for test receivers, so that a host without
 * pyzmq (the H200 image) still speaks it: Python only pickles.
 *
 * libzmq is loaded with dlopen at first use (libzmq.so.5; SKEIN_ZMQ_LIB
 * overrides), like CUDA and UCX in libskein: no build dependency, and a
 * clear error where it is missing.  A socket is REQ (the sender, which
 * binds) or REP (the receiver, which connects); every call takes a timeout
 * so that a silent peer never hangs the caller.  Messages are whole byte
 * strings: the last received one stays readable (eng_zmq_data) until the
 * next receive or close.
 */

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transfer/include/skein_xfer.h"

/* libzmq's ABI (zmq.h, stable since 4.x): constants and the message type */
enum { ZQ_REQ = 3, ZQ_REP = 4, ZQ_LINGER = 17, ZQ_RCVTIMEO = 27, ZQ_SNDTIMEO = 28 };
typedef struct { _Alignas(8) unsigned char b[64]; } zq_msg;

static struct {
	void *(*ctx_new)(void);
	void *(*socket)(void *, int);
	int (*bind)(void *, const char *);
	int (*connect)(void *, const char *);
	int (*close)(void *);
	int (*setsockopt)(void *, int, const void *, size_t);
	int (*send)(void *, const void *, size_t, int);
	int (*msg_init)(zq_msg *);
	int (*msg_recv)(zq_msg *, void *, int);
	int (*msg_close)(zq_msg *);
	void *(*msg_data)(zq_msg *);
	size_t (*msg_size)(const zq_msg *);
	int (*errno_)(void);
	const char *(*strerror)(int);
	void *ctx;
	char why[160];
} zq;
static pthread_once_t zq_once = PTHREAD_ONCE_INIT;

typedef struct eng_zmq {
	void *s;
	zq_msg msg;
	int have_msg;
} eng_zmq;

static void zq_load(void)
{
	const char *name = getenv("SKEIN_ZMQ_LIB");
	void *h = dlopen(name && *name ? name : "libzmq.so.5", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(zq.why, sizeof zq.why, "libzmq: %s (install libzmq5)", dlerror());
		return;
	}
#define ZQ_SYM(f, s) do { *(void **)&zq.f = dlsym(h, "zmq_" s); if (!zq.f) { \
	snprintf(zq.why, sizeof zq.why, "libzmq: no zmq_%s", s); return; } } while (0)
	ZQ_SYM(ctx_new, "ctx_new"); ZQ_SYM(socket, "socket"); ZQ_SYM(bind, "bind");
	ZQ_SYM(connect, "connect"); ZQ_SYM(close, "close"); ZQ_SYM(setsockopt, "setsockopt");
	ZQ_SYM(send, "send"); ZQ_SYM(msg_init, "msg_init"); ZQ_SYM(msg_recv, "msg_recv");
	ZQ_SYM(msg_close, "msg_close"); ZQ_SYM(msg_data, "msg_data"); ZQ_SYM(msg_size, "msg_size");
	ZQ_SYM(errno_, "errno"); ZQ_SYM(strerror, "strerror");
#undef ZQ_SYM
	zq.ctx = zq.ctx_new();
	if (!zq.ctx) snprintf(zq.why, sizeof zq.why, "libzmq: zmq_ctx_new failed");
}

static int zq_fail(char *err, size_t errlen, const char *what)
{
	if (err && errlen) snprintf(err, errlen, "%s: %s", what, zq.strerror(zq.errno_()));
	return -1;
}

/* Opens a REQ (rep=0) socket bound at addr, or a REP (rep=1) connected to it. */
int eng_zmq_open(eng_zmq **out, int rep, const char *addr, int timeout_ms, char *err, size_t errlen)
{
	*out = NULL;
	pthread_once(&zq_once, zq_load);
	if (!zq.ctx) {
		if (err && errlen) snprintf(err, errlen, "%s", zq.why[0] ? zq.why : "libzmq unavailable");
		return -1;
	}
	if (!addr || (strncmp(addr, "ipc://", 6) && strncmp(addr, "tcp://127.", 10))) {
		if (err && errlen) snprintf(err, errlen, "address %.80s: ipc:// or tcp://127.x only", addr ? addr : "(null)");
		return -1;
	}
	eng_zmq *z = calloc(1, sizeof *z);
	if (!z) {
		if (err && errlen) snprintf(err, errlen, "out of memory");
		return -1;
	}
	z->s = zq.socket(zq.ctx, rep ? ZQ_REP : ZQ_REQ);
	if (!z->s) {
		free(z);
		return zq_fail(err, errlen, "zmq_socket");
	}
	int zero = 0;
	zq.setsockopt(z->s, ZQ_LINGER, &zero, sizeof zero); /* close never blocks on unsent bytes */
	zq.setsockopt(z->s, ZQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
	zq.setsockopt(z->s, ZQ_SNDTIMEO, &timeout_ms, sizeof timeout_ms);
	if ((rep ? zq.connect(z->s, addr) : zq.bind(z->s, addr)) != 0) {
		zq_fail(err, errlen, rep ? "zmq_connect" : "zmq_bind");
		zq.close(z->s);
		free(z);
		return -1;
	}
	*out = z;
	return 0;
}

int eng_zmq_send(eng_zmq *z, const void *buf, size_t len, char *err, size_t errlen)
{
	if (zq.send(z->s, buf, len, 0) < 0) return zq_fail(err, errlen, "zmq_send");
	return 0;
}

/* Receives one message; returns its size (its bytes: eng_zmq_data), or -1. */
long long eng_zmq_recv(eng_zmq *z, char *err, size_t errlen)
{
	if (z->have_msg) zq.msg_close(&z->msg);
	z->have_msg = 0;
	zq.msg_init(&z->msg);
	if (zq.msg_recv(&z->msg, z->s, 0) < 0) {
		int e = zq.errno_();
		zq.msg_close(&z->msg);
		if (err && errlen) snprintf(err, errlen, "zmq_recv: %s", e == EAGAIN ? "timed out" : zq.strerror(e));
		return -1;
	}
	z->have_msg = 1;
	return (long long)zq.msg_size(&z->msg);
}

const void *eng_zmq_data(eng_zmq *z)
{
	return z->have_msg ? zq.msg_data(&z->msg) : NULL;
}

void eng_zmq_close(eng_zmq **zp)
{
	eng_zmq *z = zp ? *zp : NULL;
	if (!z) return;
	if (z->have_msg) zq.msg_close(&z->msg);
	zq.close(z->s);
	free(z);
	*zp = NULL;
}
