/* transfer/paths/xfer_ucp.h: UCX's UCP, loaded with dlopen (xfer_ucp.c).
 *
 * The prototypes come from UCX's own headers (libucx-dev, 1.13 on Debian 12)
 * when they are there at build time; the library, libucp.so.0, is opened at
 * run time, so libskein builds and runs where UCX is missing (p2p-ucx then
 * says why it cannot run) and one build runs against a newer UCX (1.16 on the
 * H200 host: UCP keeps its ABI within 1.x, parameters grow behind field
 * masks).  Without the headers XFER_HAVE_UCX is 0 and p2p-ucx reports that it
 * was built without them. */
#ifndef XFER_UCP_H
#define XFER_UCP_H

#include "transfer/core/xfer_int.h"

#if defined(__has_include) && !defined(SKEIN_NO_UCX) /* SKEIN_NO_UCX: build as if missing */
#if __has_include(<ucp/api/ucp.h>)
#include <ucp/api/ucp.h>
#include <ucs/debug/log_def.h> /* ucs_log_push_handler: UCX's messages to stderr */
#define XFER_HAVE_UCX 1
#endif
#endif
#ifndef XFER_HAVE_UCX
#define XFER_HAVE_UCX 0
#endif

/* What UCX offers, by kind of transport (a bitmask). */
enum {
	XFER_UCX_RDMA = 1, /* rc, dc, ud over verbs or mlx5, srd: a NIC that writes remote memory */
	XFER_UCX_SHM = 2,  /* cma, knem, xpmem, posix, sysv: two processes of one host */
	XFER_UCX_TCP = 4,
	XFER_UCX_DEV = 8,  /* cuda_copy, cuda_ipc, gdr_copy, rocm */
};

/* The kind of one transport name ("rc_mlx5" -> XFER_UCX_RDMA; 0: other). */
int xfer_ucx_kind(const char *tl);
/* "rdma", "shared memory", "tcp" for a mask: the best kind first. */
const char *xfer_ucx_kind_name(int kinds);

/* Whether UCX can run here, and what it offers under this process's UCX_TLS
 * and UCX_NET_DEVICES: 0 with *kinds and a list like "tcp/lo tcp/eth0
 * cma/memory posix/memory sysv/memory" in tls; -1 with the reason in why.
 * The answer is kept for as long as those two variables keep their values. */
int xfer_ucx_offers(int *kinds, char *tls, size_t tls_len, char *why, size_t why_len);

#if XFER_HAVE_UCX
#define XFER_UCP_FN(name) __typeof__(name) *name
typedef struct {
	void *h;
	XFER_UCP_FN(ucp_config_read);
	XFER_UCP_FN(ucp_config_release);
	XFER_UCP_FN(ucp_init_version);
	XFER_UCP_FN(ucp_cleanup);
	XFER_UCP_FN(ucp_context_print_info);
	XFER_UCP_FN(ucp_worker_create);
	XFER_UCP_FN(ucp_worker_destroy);
	XFER_UCP_FN(ucp_worker_get_address);
	XFER_UCP_FN(ucp_worker_release_address);
	XFER_UCP_FN(ucp_worker_progress);
	XFER_UCP_FN(ucp_worker_get_efd);
	XFER_UCP_FN(ucp_worker_arm);
	XFER_UCP_FN(ucp_ep_create);
	XFER_UCP_FN(ucp_ep_close_nbx);
	XFER_UCP_FN(ucp_ep_print_info);
	XFER_UCP_FN(ucp_ep_flush_nbx);
	XFER_UCP_FN(ucp_put_nbx);
	XFER_UCP_FN(ucp_mem_map);
	XFER_UCP_FN(ucp_mem_unmap);
	XFER_UCP_FN(ucp_mem_query);
	XFER_UCP_FN(ucp_rkey_pack);
	XFER_UCP_FN(ucp_rkey_buffer_release);
	XFER_UCP_FN(ucp_ep_rkey_unpack);
	XFER_UCP_FN(ucp_rkey_destroy);
	XFER_UCP_FN(ucp_rkey_ptr);
	XFER_UCP_FN(ucp_request_check_status);
	XFER_UCP_FN(ucp_request_free);
	XFER_UCP_FN(ucp_get_version_string);
	XFER_UCP_FN(ucp_config_modify);
	XFER_UCP_FN(ucs_status_string);
	XFER_UCP_FN(ucs_log_push_handler);
} xfer_ucp_api;
#undef XFER_UCP_FN

/* Loads libucp.so.0 once (or $SKEIN_UCP_LIB); NULL with why filled when it
 * cannot. */
const xfer_ucp_api *xfer_ucp(char *why, size_t n);
/* While on, UCX's warnings and errors in this thread are kept back (the
 * caller reports what went wrong); otherwise they go to stderr. */
void xfer_ucp_quiet(int on);
/* The last message kept back in this thread ("" when none), and the three
 * "%s%s%s" arguments that append it as " (UCX: ...)" to an error. */
const char *xfer_ucp_last(void);
#define XFER_UCP_SAID(m) (m)[0] ? " (UCX: " : "", (m), (m)[0] ? ")" : ""
/* A context for RMA with wakeup, from this process's UCX_* variables. */
int xfer_ucp_context(const xfer_ucp_api *u, ucp_context_h *out, xfer_err *err);
/* The transports a context offers ("tl/dev" separated by spaces) and their kinds. */
int xfer_ucp_context_tls(const xfer_ucp_api *u, ucp_context_h c, char *tls, size_t n);
/* The lanes an endpoint uses for RMA, e.g. "cma/memory"; with no RMA lane,
 * "am:" and the active-message lanes (UCX then emulates puts over them). */
void xfer_ucp_ep_lanes(const xfer_ucp_api *u, ucp_ep_h ep, char *out, size_t n);
#endif

#endif
