/* eng_zmq: libzmq (dlopen) for checkpoint-engine's weight protocol; see eng_zmq.c. */
#ifndef ENG_ZMQ_H
#define ENG_ZMQ_H
#include <stddef.h>

typedef struct eng_zmq eng_zmq;
int eng_zmq_open(eng_zmq **out, int rep, const char *addr, int timeout_ms, char *err, size_t errlen);
int eng_zmq_send(eng_zmq *z, const void *buf, size_t len, char *err, size_t errlen);
long long eng_zmq_recv(eng_zmq *z, char *err, size_t errlen);
const void *eng_zmq_data(eng_zmq *z);
void eng_zmq_close(eng_zmq **z);
#endif
