/* transfer/paths/xfer_ucp.c: UCX's UCP loaded with dlopen, and what it offers.
 *
 * Like xfer_cuda.c: the first call opens libucp.so.0 (or $SKEIN_UCP_LIB) and
 * looks every function up once, keeping the reason when it cannot.  UCX has
 * no call that lists the transports a context chose in 1.13 (ucp_ep_query
 * learns that in 1.14+), so we read them from ucp_context_print_info and
 * ucp_ep_print_info into a memory stream: "resource N : md M dev D flags --
 * tl/dev" lines for the context, "lane[i]: k:tl/dev.p ... rma_bw#0" lines
 * for an endpoint.  Both formats have held from 1.10 to 1.16; a format we
 * do not recognise gives an empty list, never a wrong one.
 *
 * UCX prints its warnings on stdout by default, which is the program's:
 * a log handler (ucs_log_push_handler) sends them to stderr, or keeps them
 * back where we expect them and fold UCX's last word into our error.  Our
 * transport settings go on the context's configuration (ucp_config_modify),
 * never into the process's environment. */
#include "transfer/paths/xfer_ucp.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const struct {
	const char *prefix;
	int kind;
} tl_kinds[] = {
	{ "rc", XFER_UCX_RDMA },	{ "dc", XFER_UCX_RDMA },      { "ud", XFER_UCX_RDMA },
	{ "srd", XFER_UCX_RDMA },	{ "cma", XFER_UCX_SHM },      { "knem", XFER_UCX_SHM },
	{ "xpmem", XFER_UCX_SHM },	{ "posix", XFER_UCX_SHM },    { "sysv", XFER_UCX_SHM },
	{ "tcp", XFER_UCX_TCP },	{ "cuda", XFER_UCX_DEV },     { "gdr_copy", XFER_UCX_DEV },
	{ "rocm", XFER_UCX_DEV },
};

int xfer_ucx_kind(const char *tl)
{
	for (size_t i = 0; i < sizeof tl_kinds / sizeof tl_kinds[0]; i++) {
		size_t k = strlen(tl_kinds[i].prefix);
		if (!strncmp(tl, tl_kinds[i].prefix, k) && (tl[k] == 0 || tl[k] == '_' || tl[k] == '/'))
			return tl_kinds[i].kind;
	}
	return 0;
}

const char *xfer_ucx_kind_name(int kinds)
{
	if (kinds & XFER_UCX_RDMA) return "rdma";
	if (kinds & XFER_UCX_SHM) return "shared memory";
	if (kinds & XFER_UCX_TCP) return "tcp";
	return "none";
}

#if XFER_HAVE_UCX

static xfer_ucp_api g_u;
static char g_why[256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* UCX's warnings and errors: to stderr, one line each; while this thread is
 * quiet, kept (the last one) for the error that explains them. */
static _Thread_local int g_quiet;
static _Thread_local char g_last[256];

static ucs_log_func_rc_t log_to_stderr(const char *file, unsigned line, const char *fn, ucs_log_level_t level,
				       const ucs_log_component_config_t *cc, const char *fmt, va_list ap)
{
	(void)fn;
	(void)cc;
	static const char *names[] = { "FATAL", "ERROR", "WARN" };
	if (level > UCS_LOG_LEVEL_WARN) return UCS_LOG_FUNC_RC_CONTINUE; /* asked for with UCX_LOG_LEVEL: UCX's */
	char msg[sizeof g_last];
	vsnprintf(msg, sizeof msg, fmt, ap);
	if (g_quiet) {
		memcpy(g_last, msg, sizeof msg);
		return UCS_LOG_FUNC_RC_STOP;
	}
	const char *base = strrchr(file, '/');
	fprintf(stderr, "skein: UCX %s: %s (%s:%u)\n", names[level], msg, base ? base + 1 : file, line);
	return UCS_LOG_FUNC_RC_STOP;
}

void xfer_ucp_quiet(int on)
{
	g_quiet = on;
	if (on) g_last[0] = 0;
}

const char *xfer_ucp_last(void) { return g_last; }

#define LOAD(fn)                                                                           \
	do {                                                                               \
		*(void **)&g_u.fn = dlsym(g_u.h, #fn);                                     \
		if (!g_u.fn) {                                                             \
			snprintf(g_why, sizeof g_why, "%s lacks %s", lib, #fn);            \
			dlclose(g_u.h);                                                    \
			g_u.h = NULL;                                                      \
			return;                                                            \
		}                                                                          \
	} while (0)

static void load(void)
{
	const char *lib = getenv("SKEIN_UCP_LIB");
	if (!lib || !*lib) lib = "libucp.so.0";
	g_u.h = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
	if (!g_u.h) {
		const char *e = dlerror();
		snprintf(g_why, sizeof g_why, "UCX (%s) was not found (%s); install libucx0 or set SKEIN_UCP_LIB", lib,
			 e ? e : "dlopen failed");
		return;
	}
	LOAD(ucp_config_read);
	LOAD(ucp_config_release);
	LOAD(ucp_init_version);
	LOAD(ucp_cleanup);
	LOAD(ucp_context_print_info);
	LOAD(ucp_worker_create);
	LOAD(ucp_worker_destroy);
	LOAD(ucp_worker_get_address);
	LOAD(ucp_worker_release_address);
	LOAD(ucp_worker_progress);
	LOAD(ucp_worker_get_efd);
	LOAD(ucp_worker_arm);
	LOAD(ucp_ep_create);
	LOAD(ucp_ep_close_nbx);
	LOAD(ucp_ep_print_info);
	LOAD(ucp_ep_flush_nbx);
	LOAD(ucp_put_nbx);
	LOAD(ucp_mem_map);
	LOAD(ucp_mem_unmap);
	LOAD(ucp_mem_query);
	LOAD(ucp_rkey_pack);
	LOAD(ucp_rkey_buffer_release);
	LOAD(ucp_ep_rkey_unpack);
	LOAD(ucp_rkey_destroy);
	LOAD(ucp_rkey_ptr);
	LOAD(ucp_request_check_status);
	LOAD(ucp_request_free);
	LOAD(ucp_get_version_string);
	LOAD(ucp_config_modify);
	LOAD(ucs_status_string); /* libucs, found through libucp's dependencies */
	LOAD(ucs_log_push_handler);
	/* UCX prints its warnings on stdout, which belongs to the program
	 * that links us: they go to stderr, or nowhere where we expect them
	 * and say what happened ourselves (xfer_ucp_quiet) */
	g_u.ucs_log_push_handler(log_to_stderr);
}

const xfer_ucp_api *xfer_ucp(char *why, size_t n)
{
	pthread_once(&g_once, load);
	if (!g_u.h) {
		if (why && n) snprintf(why, n, "%s", g_why);
		return NULL;
	}
	return &g_u;
}

/* Whether a UCX_TLS value lets TCP in ("tcp", "all", unset, "^sm"). */
static int tcp_listed(const char *tls)
{
	if (!tls || !*tls) return 1;
	if (*tls == '^') return !strstr(tls, "tcp");
	return strstr(tls, "tcp") || strstr(tls, "all");
}

static const char *const tcp_defaults[][2] = { { "TX_SEG_SIZE", "256k" }, { "RX_SEG_SIZE", "512k" } };

int xfer_ucp_context(const xfer_ucp_api *u, ucp_context_h *out, xfer_err *err)
{
	ucp_config_t *cfg = NULL;
	ucs_status_t st = u->ucp_config_read(NULL, NULL, &cfg); /* UCX_TLS, UCX_NET_DEVICES, ... */
	if (st != UCS_OK)
		return xfer_fail(err, XFER_EUNAVAIL, "UCX configuration (UCX_* variables): %s", u->ucs_status_string(st));
	/* UCX's TCP carries puts as active messages (UCX 1.13 has no
	 * one-sided put over TCP) in segments of 8 KiB by default; 256 KiB
	 * ones cut the per-segment work (0.4x -> 0.9x of p2p-tcp on 2 cores).
	 * Set on this context's configuration (UCX hands the keys it does not
	 * know itself to the transports: TCP's, unprefixed), unless the
	 * environment says, and only where UCX_TLS lets TCP in (UCX warns of
	 * keys no transport took). */
	for (size_t i = 0; tcp_listed(getenv("UCX_TLS")) && i < sizeof tcp_defaults / sizeof tcp_defaults[0]; i++) {
		char var[64];
		snprintf(var, sizeof var, "UCX_%s", tcp_defaults[i][0]);
		if (!getenv(var)) u->ucp_config_modify(cfg, tcp_defaults[i][0], tcp_defaults[i][1]);
	}
	/* workers of one context in several threads (p2p-ucx's lanes): UCX
	 * then locks what they share, its registration cache first (UCX 1.16
	 * registers the sources of large puts there; unlocked, it aborts) */
	ucp_params_t p = { .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
			   .features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP,
			   .mt_workers_shared = 1 };
	xfer_ucp_quiet(1); /* a failure is ours to explain, with UCX's last word */
	st = u->ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &p, cfg, out);
	xfer_ucp_quiet(0);
	u->ucp_config_release(cfg);
	if (st != UCS_OK)
		return xfer_fail(err, XFER_EUNAVAIL, "UCX (%s) could not start: %s%s%s%s", u->ucp_get_version_string(),
				 u->ucs_status_string(st), XFER_UCP_SAID(g_last));
	return 0;
}

/* Runs print(arg, stream) into memory and hands back the text (free it). */
static char *printed(void (*print)(const void *, FILE *), const void *arg)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f) return NULL;
	print(arg, f);
	fclose(f);
	return buf;
}

/* Appends a word (wl bytes at w) to a space-separated list unless it is
 * there already. */
static void add_word(char *out, size_t n, const char *w, size_t wl)
{
	char word[128];
	if (wl == 0 || wl >= sizeof word) return;
	memcpy(word, w, wl);
	word[wl] = 0;
	for (const char *p = out; (p = strstr(p, word)); p++)
		if ((p == out || p[-1] == ' ') && (p[wl] == ' ' || p[wl] == 0)) return;
	size_t ol = strlen(out);
	if (ol + wl + 2 > n) return;
	if (ol) out[ol++] = ' ';
	memcpy(out + ol, word, wl + 1);
}

static const xfer_ucp_api *g_print_api;
static void print_ctx(const void *c, FILE *f) { g_print_api->ucp_context_print_info((ucp_context_h)c, f); }
static void print_ep(const void *e, FILE *f) { g_print_api->ucp_ep_print_info((ucp_ep_h)e, f); }
static pthread_mutex_t g_print_mu = PTHREAD_MUTEX_INITIALIZER;

static char *print_locked(const xfer_ucp_api *u, void (*print)(const void *, FILE *), const void *arg)
{
	pthread_mutex_lock(&g_print_mu);
	g_print_api = u;
	char *s = printed(print, arg);
	pthread_mutex_unlock(&g_print_mu);
	return s;
}

int xfer_ucp_context_tls(const xfer_ucp_api *u, ucp_context_h c, char *tls, size_t n)
{
	int kinds = 0;
	tls[0] = 0;
	char *text = print_locked(u, print_ctx, c);
	for (char *save = NULL, *line = text ? strtok_r(text, "\n", &save) : NULL; line;
	     line = strtok_r(NULL, "\n", &save)) {
		if (!strstr(line, " resource ")) continue;
		char *w = strrchr(line, ' '); /* the last word: tl/dev */
		if (!w || !strchr(w, '/')) continue;
		w++;
		if (!strncmp(w, "self/", 5)) continue;
		kinds |= xfer_ucx_kind(w);
		add_word(tls, n, w, strlen(w));
	}
	free(text);
	return kinds;
}

void xfer_ucp_ep_lanes(const xfer_ucp_api *u, ucp_ep_h ep, char *out, size_t n)
{
	char rma[256] = "", am[256] = "";
	int puts = 0;
	char *text = print_locked(u, print_ep, ep);
	for (char *save = NULL, *line = text ? strtok_r(text, "\n", &save) : NULL; line;
	     line = strtok_r(NULL, "\n", &save)) {
		if (strstr(line, " put[")) puts++; /* an RMA lane's put protocols */
		char *p = strstr(line, "lane[");
		if (!p || !(p = strchr(p, ':'))) continue;
		p += strspn(p + 1, " ") + 1;
		char *colon = strchr(p, ':'), *sp = strchr(p, ' ');
		if (colon && (!sp || colon < sp)) p = colon + 1; /* "4:cma/memory.0" */
		size_t wl = strcspn(p, " "), d = wl;
		while (d > 0 && p[d - 1] >= '0' && p[d - 1] <= '9') d--;
		if (d > 0 && d < wl && p[d - 1] == '.') wl = d - 1; /* ".0": the path index */
		if (!memchr(p, '/', wl) || !strncmp(p, "self/", 5)) continue;
		if (strstr(p + wl, " am")) add_word(am, sizeof am, p, wl);
		else add_word(rma, sizeof rma, p, wl);
	}
	free(text);
	if (!am[0] && !rma[0]) snprintf(out, n, "lanes unknown");
	else if (puts) snprintf(out, n, "one-sided puts on %d RMA lane%s (lanes: %s%s%s)", puts, puts > 1 ? "s" : "", am,
			       am[0] && rma[0] ? " " : "", rma);
	else snprintf(out, n, "lanes: %s%s%s; no RMA lane listed (UCX 1.13 then emulates puts over active messages; "
		      "newer UCX lists its protocols elsewhere)", am, am[0] && rma[0] ? " " : "", rma);
}

/* ---- what UCX offers, kept per UCX_TLS / UCX_NET_DEVICES ---- */

static pthread_mutex_t g_offer_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_offer_env[512], g_offer_tls[512], g_offer_why[256];
static int g_offer_rc = 1, g_offer_kinds;

int xfer_ucx_offers(int *kinds, char *tls, size_t tls_len, char *why, size_t why_len)
{
	char env[512];
	const char *a = getenv("UCX_TLS"), *b = getenv("UCX_NET_DEVICES");
	snprintf(env, sizeof env, "%s|%s", a ? a : "", b ? b : "");
	pthread_mutex_lock(&g_offer_mu);
	if (g_offer_rc > 0 || strcmp(env, g_offer_env) != 0) {
		snprintf(g_offer_env, sizeof g_offer_env, "%s", env);
		g_offer_tls[0] = 0;
		g_offer_kinds = 0;
		const xfer_ucp_api *u = xfer_ucp(g_offer_why, sizeof g_offer_why);
		ucp_context_h c = NULL;
		xfer_err e;
		g_offer_rc = -1;
		if (u && xfer_ucp_context(u, &c, &e) != 0) snprintf(g_offer_why, sizeof g_offer_why, "%s", e.msg);
		if (c) {
			g_offer_kinds = xfer_ucp_context_tls(u, c, g_offer_tls, sizeof g_offer_tls);
			u->ucp_cleanup(c);
			g_offer_rc = 0;
			if (!(g_offer_kinds & (XFER_UCX_RDMA | XFER_UCX_SHM | XFER_UCX_TCP))) {
				g_offer_rc = -1;
				snprintf(g_offer_why, sizeof g_offer_why,
					 "UCX %s offers no transport for host memory between processes (UCX_TLS=%s, "
					 "UCX_NET_DEVICES=%s; it has: %s)",
					 u->ucp_get_version_string(), a ? a : "(unset)", b ? b : "(unset)",
					 g_offer_tls[0] ? g_offer_tls : "nothing");
			}
		}
	}
	int rc = g_offer_rc;
	if (kinds) *kinds = g_offer_kinds;
	if (tls && tls_len) snprintf(tls, tls_len, "%s", g_offer_tls);
	if (rc != 0 && why && why_len) snprintf(why, why_len, "%s", g_offer_why);
	pthread_mutex_unlock(&g_offer_mu);
	return rc;
}

#else /* built without UCX's headers */

int xfer_ucx_offers(int *kinds, char *tls, size_t tls_len, char *why, size_t why_len)
{
	if (kinds) *kinds = 0;
	if (tls && tls_len) tls[0] = 0;
	snprintf(why, why_len, "libskein was built without UCX's headers (<ucp/api/ucp.h>, Debian's libucx-dev)");
	return -1;
}

#endif
