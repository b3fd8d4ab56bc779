/* transfer/core/xfer_int.h: what the files of libskein share and nobody else sees.
 *
 * The endpoint holds a table of function pointers (xfer_path_ops) chosen by
 * name at xfer_open, as redis chooses its connection types: each data path
 * lives in its own file and fills one table.  Helpers for errors, clocks, file
 * I/O, the undo journal and the dlopen'd CUDA runtime sit here too. */
#ifndef XFER_INT_H
#define XFER_INT_H

#include "transfer/include/skein_xfer.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/uio.h>

/* ---- errors ---- */
int xfer_fail(xfer_err *err, xfer_code code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Like xfer_fail, appending ": strerror(errno)". */
int xfer_fail_errno(xfer_err *err, xfer_code code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Prepends context to an error already set. */
void xfer_err_prefix(xfer_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

double xfer_now(void); /* monotonic seconds */

/* ---- manifest internals ---- */
struct xfer_manifest {
	xfer_tensor *t;
	size_t n, cap;
	uint64_t bytes;
};
/* Offsets of each tensor in the back-to-back byte space (n+1 entries). */
uint64_t *xfer_manifest_offsets(const xfer_manifest *m);
/* One line per tensor, "name dtype d0xd1x.. nbytes", for handshakes. */
char *xfer_manifest_describe(const xfer_manifest *m, size_t *len);
/* Parses what xfer_manifest_describe wrote into a manifest with NULL ptrs;
 * more than max_tensors lines is an error. */
xfer_manifest *xfer_manifest_parse(const char *text, size_t len, size_t max_tensors, xfer_err *err);
int xfer_shape_format(const xfer_tensor *t, char *out, size_t n);

/* ---- data path table ---- */
/* How a coordinated sender reaches the participants of an update. */
typedef enum {
	XFER_FAN_PEERS,   /* one sub-endpoint per participant (the p2p paths; every table says so) */
	XFER_FAN_SELF,    /* this endpoint writes the version once for all (disk-delta) */
	XFER_FAN_HANDOFF, /* the engines copy from the sender's memory (colocated: the begin's setup blob) */
	XFER_FAN_BCAST,   /* one communicator of the sender and the participants (broadcast*) */
} xfer_fan;
typedef struct xfer_path_ops {
	const char *name;
	int (*probe)(char *why, size_t n);
	int (*setup)(xfer_endpoint *ep, xfer_err *err);
	int (*send)(xfer_endpoint *ep, uint64_t version, xfer_err *err);
	int (*receive)(xfer_endpoint *ep, int wait_ms, uint64_t *version, xfer_err *err);
	void (*abort)(xfer_endpoint *ep);
	void (*teardown)(xfer_endpoint *ep);
	/* p2p paths: whether a session with a sender is up (the p2p chooser
	 * accepts the next one itself when not) */
	int (*connected)(const xfer_endpoint *ep);
	/* receiver: the undo journal of the last receive written back (only
	 * called when it set ep->undo_ready) */
	int (*rollback)(xfer_endpoint *ep, xfer_err *err);

	/* What the coordinated update (transfer/update/) asks of a path: it
	 * reads these and never which path it holds.  NULL: nothing to do. */
	xfer_fan fan;
	int chain;             /* receiver: catches up from its own chain (disk-delta's folder) */
	/* sender, at begin: the setup blob for Begin.setup (colocated: the
	 * handoff of v; broadcast: a fresh NCCL unique id), malloc'd */
	int (*begin_setup)(xfer_endpoint *ep, uint64_t v, unsigned char **blob, size_t *len, xfer_err *err);
	/* receiver: the instruction's setup blob for the next receive (len 0:
	 * the instruction brought none; blob NULL: the receive is over, forget
	 * it); the path keeps the pointer until then */
	int (*take_setup)(xfer_endpoint *ep, const unsigned char *blob, size_t len, xfer_err *err);
	/* receiver: v is held now, committed (disk-delta: receivers/<id>) */
	int (*commit)(xfer_endpoint *ep, uint64_t v, xfer_err *err);
	/* receiver: the bytes it holds are no version any more (an abort it could not undo) */
	void (*forget)(xfer_endpoint *ep);
	/* sender: v was aborted (disk-delta: removed from the folder, the next one full) */
	int (*drop)(xfer_endpoint *ep, uint64_t v, xfer_err *err);
} xfer_path_ops;

extern const xfer_path_ops xfer_disk_ops;
extern const xfer_path_ops xfer_tcp_ops;
extern const xfer_path_ops xfer_rdma_ops;
extern const xfer_path_ops xfer_bcast_ops;
extern const xfer_path_ops xfer_bcast_packed_ops;
extern const xfer_path_ops xfer_ipc_ops;
extern const xfer_path_ops xfer_ucx_ops;
extern const xfer_path_ops xfer_p2p_ops; /* "p2p": UCX or p2p-tcp, chosen per peer */

/* The ticket in a p2p hello (wire: p2p-tcp 4, p2p-ucx 3), host order. */
enum { XFER_TICKET_SET = 1 };
typedef struct {
	uint32_t flags, pad;  /* XFER_TICKET_SET: the rest is meant */
	uint64_t job;         /* XXH3-64 of the job's name */
	uint64_t version;     /* the update's, or the catch-up's */
	unsigned char nonce[XFER_NONCE_BYTES]; /* the head's, for that update or catch-up */
} xfer_ticket;

struct xfer_endpoint {
	const xfer_path_ops *ops;
	xfer_config cfg;       /* strings below are copies */
	char *s_dir, *s_rid, *s_host, *s_jdir;
	const xfer_manifest *m;
	xfer_bucket *buckets;
	size_t nbuckets;
	uint64_t *offsets;     /* back-to-back offsets, n+1 */
	char note[256];        /* why the path fell back */
	int port;              /* p2p/colocated receiver: the port it listens on */
	atomic_int aborted;
	xfer_stats stats;
	void *impl;            /* the path's own state */
	/* p2p paths run under the p2p chooser (xfer_p2p.c) */
	int shared_lfd;        /* receiver: listen here (the chooser's), not on a socket of its own; -1 */
	int pending_ctl;       /* receiver: a control connection the chooser accepted; -1 ... */
	unsigned char pending_hello[256]; /* ... and its hello, read off it by the gate */
	size_t pending_hello_len;
	int p2p_auto;          /* p2p-ucx: the peer may be told to use p2p-tcp instead */
	const char *run_path;  /* the path that runs when not ops->name */
	/* coordinated updates: the update client's state (transfer/update/),
	 * opaque here; core and the paths never read it, only test it for NULL */
	void *upd;             /* NULL: not coordinated */
	char *s_rpc, *s_job, *s_member;
	uint64_t target;       /* receiver: receive up to exactly this version (0: the newest) */
	int undo_ready;        /* receiver: the last receive journaled what it overwrote ... */
	uint64_t undo_to;      /* ... and xfer_rollback puts this version back */
	int keep_listener;     /* receiver: an abort ends the session, the listening socket stays */
	int fanout;            /* coordinated sender on a peer path: sub-endpoints per peer, no setup here */
	int commit_later;      /* receiver: a version is recorded held at ops->commit, not at receive */
	int setup_blobs;       /* a version's setup travels as blobs (ops->begin_setup, take_setup),
				  not over a socket of the path's own */
	int journal_first;     /* coordinated receiver: the first version is journaled too, so that
				  an abort (a forged first version) puts the initial weights back */
	atomic_int user_aborted; /* xfer_abort was called (xfer_rearm leaves it) */
	xfer_update_stats update;
	/* the root (xfer_root.c) of the sums the last send computed or the last
	 * receive verified against, for root_version (0: none, the path keeps none) */
	unsigned char root[16], mdigest[16];
	uint64_t root_version;
	int have_mdigest;      /* mdigest: xfer_manifest_digest of m, computed once */
	/* p2p hellos (xfer_gate.c): the ticket a sender presents and a receiver
	 * requires (has_ticket 0: none); a receiver's gate on its listener, the
	 * listener's owner's (subs under the chooser share it) */
	int has_ticket;
	xfer_ticket ticket;
	struct xfer_gate *gate;
};

/* Limits of what a coordinated update carries, checked where the values
 * enter: the environment (xfer_env.c), the handoff (xfer_ipc.c), the codec. */
enum {
	XFER_UPD_STR = 256,                  /* member, node, endpoint, mode, peer: longer is refused */
	XFER_UPD_SETUP_MAX = 512 << 10,      /* colocated: the handoff (handles, places, sums: ~16k tensors) */
};
/* SKEIN_RPC "unix:PATH" into path; -1 with a one-line error naming SKEIN_RPC. */
int xfer_rpc_parse(const char *rpc, char *path, size_t n, xfer_err *err);
/* xxh3-128 of xfer_manifest_describe, canonical (big-endian) bytes: the
 * manifest digest a Begin carries and the root binds. */
int xfer_manifest_digest(const xfer_manifest *m, unsigned char out[16], xfer_err *err);

/* ---- the root of a version's checksums (xfer_root.c) ----
 * XXH3-128 over a fixed tag, the manifest digest, the sum kind and every
 * tensor's sum in manifest order: what the sender declares to the head and
 * what a receiver's verified sums must hash to. */
int xfer_root_of(const unsigned char digest[16], xfer_sum_kind kind, const xfer_sum *sums, size_t n,
		 unsigned char out[16], xfer_err *err);
/* ep->root for version v from the m->n sums of ep's manifest. */
int xfer_root_keep(xfer_endpoint *ep, uint64_t v, xfer_sum_kind kind, const xfer_sum *sums, xfer_err *err);
void xfer_root_hex(const unsigned char root[16], char out[33]);

/* ---- p2p hellos: the ticket and the receiver's gate (xfer_gate.c) ---- */
enum {
	XFER_GATE_HELLO_MS = 2000, /* a connection says who it is within this, or is closed */
	XFER_GATE_HELLO_MAX = 256, /* the largest hello a judge may ask for */
};
/* Wire verdicts of a judge on the n bytes of hello read so far. */
typedef enum { XFER_GATE_MORE, XFER_GATE_TAKE, XFER_GATE_KEEP, XFER_GATE_REFUSE } xfer_gate_verdict;
/* MORE: read up to *need bytes, then ask again; KEEP: a hello for another
 * caller (left in the gate for it); REFUSE: why says why (sent back). */
typedef xfer_gate_verdict (*xfer_gate_judge)(void *ctx, const unsigned char *buf, size_t n, size_t *need, char *why,
					     size_t whyn);
typedef struct xfer_gate xfer_gate;
xfer_gate *xfer_gate_new(void);
void xfer_gate_free(xfer_gate **g);
/* The next connection on lfd (or kept in the gate) whose hello the judge
 * takes, within wait_ms (-1: forever): its fd (blocking, timeout_ms on it)
 * with the hello's bytes, read off it, in out and *outn; -1 with
 * XFER_ENOVERSION when wait_ms passed (the message names the last refusal),
 * XFER_EABORTED when lfd was shut down. */
/* The control connection the p2p chooser accepted for ep, and its hello
 * (copied to raw, at most XFER_GATE_HELLO_MAX bytes, *rn): its fd, handed
 * over (ep keeps none); -1 when there is none. */
int xfer_gate_take_pending(xfer_endpoint *ep, unsigned char raw[XFER_GATE_HELLO_MAX], size_t *rn);
int xfer_gate_next(xfer_gate *g, int lfd, int wait_ms, int timeout_ms, xfer_gate_judge judge, void *ctx,
		   unsigned char out[XFER_GATE_HELLO_MAX], size_t *outn, xfer_err *err);
/* A few rounds without waiting, while a session runs: what is pending is read
 * and judged (refused, or kept when the judge would take it), the silent
 * ones past their time closed, so none of them waits for the session's end. */
void xfer_gate_sweep(xfer_gate *g, int lfd, xfer_gate_judge judge, void *ctx);
uint64_t xfer_gate_refused(const xfer_gate *g);
const char *xfer_gate_last(const xfer_gate *g);
uint64_t xfer_ticket_job(const char *job);
/* 0 when ep requires no ticket or t is its ticket; -1 with why. */
int xfer_ticket_check(const xfer_endpoint *ep, const xfer_ticket *t, char *why, size_t n);

/* ---- endpoints below the public API (xfer_endpoint.c, xfer_paths.c) ----
 * What the API (xfer_path.c) and the update client (transfer/update/) share
 * without calling each other's public entry points: an endpoint opened and
 * closed without its coordinator, its data path aborted, its undo run. */
int xfer_ep_open(xfer_endpoint **out, const xfer_config *cfg, const xfer_manifest *m, xfer_err *err);
void xfer_ep_close(xfer_endpoint **ep);
void xfer_ep_abort(xfer_endpoint *ep);       /* the data path only (xfer_abort: and the coordinator) */
int xfer_ep_rollback(xfer_endpoint *ep, xfer_err *err);
int xfer_path_send(xfer_endpoint *ep, uint64_t version, xfer_err *err);
int xfer_path_receive(xfer_endpoint *ep, int wait_ms, uint64_t *version, xfer_err *err);
void xfer_rearm(xfer_endpoint *ep);

/* ---- the update client's entry points (transfer/update/) ----
 * The one place core names the coordinated update: xfer_path.c hands a
 * coordinated endpoint (ep->upd set by xfer_upd_open) to these.  Their
 * state stays opaque here (void *upd); core and paths include no update/
 * header (tests/agent/layers_test.sh). */
int xfer_upd_open(xfer_endpoint *ep, xfer_err *err);  /* sets ep->upd (cfg.coord.rpc set) */
void xfer_upd_close(xfer_endpoint *ep);               /* frees it */
int xfer_upd_publish(xfer_endpoint *ep, uint64_t version, xfer_update_stats *st, xfer_err *err);
int xfer_upd_receive(xfer_endpoint *ep, int wait_ms, uint64_t *version, xfer_err *err);
/* Stops a coordinated endpoint's data path and its subs now without
 * spoiling it: the session ends, a listening socket stays; xfer_rearm makes
 * it usable again. */
void xfer_upd_stop(xfer_endpoint *ep);
xfer_endpoint *xfer_peer_open(xfer_endpoint *parent, const char *host, int port, xfer_err *err);

/* A path's endpoint inside another (the p2p chooser's): shares the parent's
 * config, manifest and offsets; listens on shared_lfd when >= 0. */
xfer_endpoint *xfer_sub_open(xfer_endpoint *parent, const xfer_path_ops *ops, int shared_lfd, int p2p_auto,
			     xfer_err *err);
void xfer_sub_close(xfer_endpoint **sub);
/* p2p-ucx under the chooser: 1 when the last call ended because the two
 * ends agreed on p2p-tcp instead (why says why), else 0. */
int xfer_ucx_fell_back(const xfer_endpoint *ep, char *why, size_t n);

/* Sets ep->stats.seconds etc. at the end of a version. */
int xfer_check_aborted(xfer_endpoint *ep, xfer_err *err);

/* ---- file helpers (xfer_io.c) ---- */
int xfer_write_all(int fd, const void *p, size_t n, xfer_err *err);
int xfer_read_all(int fd, void *p, size_t n, xfer_err *err);
/* Whole file into a malloc'd buffer with a NUL after it. */
int xfer_read_file(const char *path, char **out, size_t *len, xfer_err *err);
int xfer_fsync_dir(const char *dir, xfer_err *err);
/* Writes a small file atomically: tmp, fsync, rename, fsync dir. */
int xfer_write_file_atomic(const char *dir, const char *name, const void *p, size_t n,
			   xfer_err *err);
int xfer_rmtree(const char *path);
/* Under a folder that others may write (xfer_io.c's comment): dirfd-relative,
 * never through a link.  xfer_open_beneath returns an fd or -1 with errno
 * (ELOOP for a link on the way, EXDEV for a name escaping dirfd). */
int xfer_name_ok(const char *name); /* one component: no '/', not . or .. */
int xfer_dir_open(const char *path, int create, xfer_err *err);
int xfer_open_beneath(int dirfd, const char *rel, int flags, mode_t mode);
/* A regular file of at most max bytes (a FIFO or device is an error). */
int xfer_read_file_at(int dirfd, const char *rel, size_t max, char **out, size_t *len, xfer_err *err);
int xfer_write_file_atomic_at(int dirfd, const char *name, const void *p, size_t n, xfer_err *err);
/* Removes name under dirfd: links are unlinked, never followed; stays on
 * dirfd's filesystem; at most 16 levels. 0, or -1 with errno. */
int xfer_rmtree_at(int dirfd, const char *name);

/* ---- undo journal (xfer_journal.c) ----
 * Records the bytes a receiver is about to overwrite, host or CUDA device
 * memory, in runs of differing 8-byte words, in memory up to 33 MiB (plus a
 * 4 MiB pinned piece for device memory) and beyond that in an unlinked
 * temporary file; xfer_journal_undo writes them back newest first.  Not
 * thread-safe: one journal per thread. */
typedef struct xfer_journal xfer_journal;
xfer_journal *xfer_journal_new(const char *dir, xfer_err *err);
void xfer_journal_free(xfer_journal **j);
/* Copies src over dst (n bytes), journaling dst's old bytes where they differ. */
int xfer_journal_copy(xfer_journal *j, void *dst, const void *src, size_t n, xfer_err *err);
/* Copies src (host) over dst (CUDA device memory), journaling dst's old
 * bytes where they differ: they are read back from the device in 4 MiB
 * pieces, and pieces that do not change are not written.  Without j, a plain
 * copy to the device.  Needs CUDA (or xfer_hooks.device_copy) only here and
 * in the undo of what it recorded. */
int xfer_journal_copy_device(xfer_journal *j, void *dst, const void *src, size_t n, xfer_err *err);
/* Journals the bytes of dst[0..n) that are about to change, without copying. */
int xfer_journal_save(xfer_journal *j, const void *dst, size_t n, xfer_err *err);
/* Journals a delta payload that undoes a change; the undo hands it to
 * apply (xfer_delta_apply, with no journal and no sum: passed in, so that
 * the journal and the codec do not call each other). */
typedef int (*xfer_blob_apply_fn)(xfer_encoding enc, size_t esz, void *dst, size_t n, const void *payload,
				  size_t plen, xfer_journal *j, xfer_sum *sum, xfer_err *err);
int xfer_journal_blob(xfer_journal *j, xfer_blob_apply_fn apply, xfer_encoding enc, size_t esz, void *dst, size_t n,
		      const void *head, size_t hlen, const void *payload, size_t plen, xfer_err *err);
int xfer_journal_undo(xfer_journal *j, xfer_err *err);
void xfer_journal_reset(xfer_journal *j);
void xfer_journal_limit(xfer_journal *j, uint64_t bytes); /* in-memory chunks, then the file */
uint64_t xfer_journal_bytes(const xfer_journal *j);
uint64_t xfer_journal_mem_bytes(const xfer_journal *j); /* of its chunks held in memory now */
/* Seconds spent in the copy calls since the last reset, less the writes to
 * the device (host: the whole journaled copy). */
double xfer_journal_seconds(const xfer_journal *j);

/* ---- chunks and stripes of the p2p paths (xfer_chunk.c), and what both
 * p2p receivers check of a sender before any of its bytes is used (pure:
 * tests/fuzz/fuzz_p2p.c feeds them) ---- */
enum {
	XFER_P2P_MANIFEST_MAX = 64 << 20, /* bytes of manifest text a receiver takes */
	XFER_P2P_CHUNKS_MAX = 1 << 20,    /* a hello's bucket size may not cut the weights finer */
};
typedef struct { uint64_t off, len; } xfer_span; /* of the back-to-back byte space */
/* Half a bucket, page aligned: two staging slots hold one bucket. */
uint64_t xfer_chunk_piece(uint64_t bucket_bytes);
/* The chunks of every bucket in order over the byte space (offsets: n+1
 * entries); an empty bucket is one empty chunk.  *out is malloc'd; a bucket
 * size of 0, or one that makes over XFER_P2P_CHUNKS_MAX chunks, is refused
 * before anything is allocated. */
int xfer_chunks(const xfer_manifest *m, const uint64_t *offsets, uint64_t bucket_bytes, xfer_span **out, size_t *n,
		xfer_err *err);
/* xfer_chunks, or with tree set (p2p-tcp) cut so that no tree chunk of a
 * tensor straddles two chunks: a chunk ending inside a tensor ends on a
 * multiple of XFER_TREE_CHUNK from its start; the piece is then at least
 * 2 * XFER_TREE_CHUNK (xfer_chunk.c). */
int xfer_chunks_cut(const xfer_manifest *m, const uint64_t *offsets, uint64_t bucket_bytes, int tree, xfer_span **out,
		    size_t *n, xfer_err *err);
/* xfer_chunks over ep's manifest; frees *out first. */
int xfer_chunks_make(const xfer_endpoint *ep, uint64_t bucket_bytes, xfer_span **out, size_t *n, xfer_err *err);
/* A receiver's plan from a sender's hello and manifest text: the text must
 * describe the receiver's own manifest (at most mine->n tensors are parsed);
 * then its chunks for the hello's bucket size (*chunks as xfer_chunks). */
int xfer_chunk_plan(const xfer_manifest *mine, const uint64_t *offsets, uint64_t bucket_bytes, const char *desc,
		    size_t len, xfer_span **chunks, size_t *nchunks, xfer_err *err);
/* The same with xfer_chunks_cut's tree cuts when tree is set. */
int xfer_chunk_plan_cut(const xfer_manifest *mine, const uint64_t *offsets, uint64_t bucket_bytes, int tree,
			const char *desc, size_t len, xfer_span **chunks, size_t *nchunks, xfer_err *err);
/* Stripe i of nstripes of chunk c: [*a, *b), page aligned, maybe empty. */
void xfer_stripe_of(xfer_span c, int nstripes, int i, uint64_t *a, uint64_t *b);
/* A version header, on both p2p paths' control stream: "SKV1", tensors,
 * version, total bytes (xfer_sock_send_vhead / xfer_sock_recv_vhead). */
typedef struct {
	char magic[4];
	uint32_t ntensors;
	uint64_t version, total;
} xfer_vhead;
/* Checks one against the manifest and the version held (have): 0 with
 * *version newer than have. */
int xfer_vhead_parse(const void *buf, size_t n, const xfer_manifest *m, uint64_t have, uint64_t *version,
		     xfer_err *err);
/* First tensor whose bytes end after byte a. */
size_t xfer_tensor_at(const xfer_endpoint *ep, uint64_t a);
/* iovecs over the tensors for [a, b); *iov is realloc'd. */
int xfer_tensor_iov(const xfer_endpoint *ep, uint64_t a, uint64_t b, struct iovec **iov, int *cap, int *n,
		    xfer_err *err);
/* Copies [a, b) from a staging slot that holds the byte space from slot_off
 * into the tensors (host or device), through j when not NULL. */
int xfer_place_stripe(const xfer_endpoint *ep, const unsigned char *slot, uint64_t slot_off, uint64_t a,
		      uint64_t b, xfer_journal *j, xfer_err *err);
/* A reset journal for each of the first `active` of max stripes (freed
 * beyond), their memory held to half a bucket in all. */
int xfer_stripe_journals(const xfer_endpoint *ep, xfer_journal **j, int max, int active, uint64_t bucket_bytes,
			 int any_cuda, xfer_err *err);
/* ep->stats.journal_bytes (sum) and journal_seconds (slowest stripe). */
void xfer_stripe_journals_stats(xfer_endpoint *ep, xfer_journal *const *j, int max);
/* After a failed version: undoes every journal (or says there was none),
 * noting it in err and ep->stats.undo_seconds. */
void xfer_stripe_journals_undo(xfer_endpoint *ep, xfer_journal **j, int max, xfer_err *err);
/* xfer_rollback of a p2p path: every journal of the last (successful)
 * version written back; 0, or -1 with err when an undo failed. */
int xfer_stripe_journals_rollback(xfer_endpoint *ep, xfer_journal **j, int max, xfer_err *err);

/* ---- delta codec (xfer_delta.c), pure: no I/O ---- */
typedef struct {
	unsigned char *p;
	size_t len, cap;
} xfer_buf;
void xfer_buf_free(xfer_buf *b);
int xfer_buf_reserve(xfer_buf *b, size_t extra);
int xfer_buf_append(xfer_buf *b, const void *p, size_t n);

/* Encodes new against old (n bytes, elements of esz bytes) into out (appended);
 * *changed gets the number of changed elements.  With update_old the changed
 * elements are copied into old as they are found (the sender's copy of the
 * last published bytes); with sum the xxh3-128 of new is computed in the
 * same pass. */
int xfer_delta_encode(xfer_encoding enc, size_t esz, void *old_, const void *new_, size_t n,
		      int update_old, xfer_buf *out, uint64_t *changed, xfer_sum *sum, xfer_err *err);
/* Applies a payload to dst (n bytes); journals what it overwrites when j;
 * with sum, the xxh3-128 of the result, hashed right behind the changes
 * while they are still in cache (a 1% change touches most cache lines). */
int xfer_delta_apply(xfer_encoding enc, size_t esz, void *dst, size_t n, const void *payload,
		     size_t plen, xfer_journal *j, xfer_sum *sum, xfer_err *err);
/* zstd wrappers (level 0 copies). */
int xfer_zstd_compress(int level, const void *src, size_t n, xfer_buf *out, xfer_err *err);
int xfer_zstd_decompress(const void *src, size_t n, xfer_buf *out, size_t max, xfer_err *err);

/* ---- disk-delta index (xfer_disk.c), pure: the text format is described
 * there; the parser checks every line and the checksum line ---- */
typedef struct {
	char name[XFER_NAME_MAX + 1];
	char dtype[16], shape[160];
	uint64_t nbytes, offset, stored, changed, stored_sum;
	xfer_sum sum;
} xfer_disk_tensor;

typedef struct {
	uint64_t chain, version, base, data_bytes;
	int full, enc, zstd; /* enc: XFER_ENC_* for deltas */
	xfer_sum_kind sum_kind; /* format 1: xxh3-128 only; format 2 names it */
	size_t n;
	xfer_disk_tensor *t;
} xfer_disk_index;

/* The index text of a version, malloc'd (its length in *len). */
char *xfer_disk_index_format(const xfer_disk_index *x, size_t *len);
/* Parses len bytes of index text (no NUL needed) that must be version v's;
 * path names it in errors.  0, or -1 with XFER_EFORMAT (x then holds
 * nothing to free). */
int xfer_disk_index_parse(const char *text, size_t len, uint64_t v, const char *path, xfer_disk_index *x,
			  xfer_err *err);
void xfer_disk_index_free(xfer_disk_index *x);

/* ---- p2p-tcp wire (xfer_tcp.c): the structs, in host order, and the pure
 * checks a receiver makes of what a sender sends before any of it is used ---- */
enum { XFER_TCP_HELLO_BYTES = 88, XFER_TCP_CONTROL = 0, XFER_TCP_DATA = 1, XFER_TCP_MAX_STREAMS = 64 };
typedef struct {
	char magic[8];
	uint32_t kind, stream, nstreams, pad;
	uint64_t session, bucket_bytes, manifest_len;
	xfer_ticket ticket;  /* wire 4 */
} xfer_tcp_hello;
/* Wire 3: after chunk k's stripes, on the control stream, the tree chunk
 * hashes (XXH3-64 of 256 KiB) that chunk k holds, then the tree sums of the
 * tensors that end in it: a header, nhash u64, ntops xfer_sum. */
typedef struct {
	char magic[4];
	uint32_t ntops;
	uint64_t chunk, nhash;
} xfer_tcp_hrec;
typedef struct {
	char magic[4];
	uint32_t stream;
	uint64_t version, chunk, off, len;
} xfer_tcp_shead;

/* Sets the magic and writes the 88 bytes. */
void xfer_tcp_hello_pack(const xfer_tcp_hello *h, unsigned char out[XFER_TCP_HELLO_BYTES]);
/* A hello of either kind; a control hello's stream count and sizes are
 * checked.  An older sender's hello (wire 2, "SKXFER2") is refused with
 * XFER_EFORMAT and a message that names it; xfer_tcp_hello_is_v2 tells it
 * apart so that the receiver can answer it. */
int xfer_tcp_hello_is_v2(const void *buf, size_t n);
int xfer_tcp_hello_parse(const void *buf, size_t n, xfer_tcp_hello *h, xfer_err *err);
/* The gate's judge of a p2p-tcp hello (n bytes so far): a control one
 * (want_data 0) or a data stream of session with nstreams; the other kind,
 * ticket right, is kept; a wrong or missing ticket (ep's) refused. */
xfer_gate_verdict xfer_tcp_judge(const xfer_endpoint *ep, int want_data, uint64_t session, uint32_t nstreams,
				 const unsigned char *buf, size_t n, size_t *need, char *why, size_t whyn);
/* (The receiver's plan from a control hello: xfer_chunk_plan_cut, tree
 * cuts.)  A stripe header must be the one want says; so must a chunk's
 * hash record header (chunk, nhash, ntops). */
int xfer_tcp_shead_parse(const void *buf, size_t n, const xfer_tcp_shead *want, xfer_err *err);
int xfer_tcp_hrec_parse(const void *buf, size_t n, const xfer_tcp_hrec *want, xfer_err *err);

/* ---- p2p-ucx wire (xfer_ucx.c): the sender's hello, in host order, and
 * the receiver's pure check of it (built with or without UCX) ---- */
enum { XFER_UCX_HELLO_BYTES = 184, XFER_UCX_MAX_STRIPES = 16, XFER_UCX_F_AUTO = 1 /* under the p2p chooser */ };
#define XFER_UCX_MAGIC "SKUCX4" /* a hello's first 8 bytes (NUL-padded); 2: lanes and a ring of slots;
				   3: the ticket; 4: tree checksums per chunk */
typedef struct {
	char magic[8];
	uint32_t flags, kinds, nstripes, pad; /* kinds: XFER_UCX_RDMA etc. (xfer_ucp.h) */
	uint64_t bucket_bytes, manifest_len;
	char boot_id[40]; /* /proc/sys/kernel/random/boot_id: one host when equal */
	char host[64];
	xfer_ticket ticket;
} xfer_ucx_hello;
/* Sets the magic and writes the 184 bytes. */
void xfer_ucx_hello_pack(const xfer_ucx_hello *h, unsigned char out[XFER_UCX_HELLO_BYTES]);
/* Checks the magic, stripe count and sizes; boot_id and host come back
 * NUL-terminated.  The plan from it: xfer_chunk_plan. */
int xfer_ucx_hello_parse(const void *buf, size_t n, xfer_ucx_hello *h, xfer_err *err);
/* The gate's judge of a p2p-ucx hello (ctx: the receiving endpoint): its
 * wire and the head's ticket; alone and under the p2p chooser. */
xfer_gate_verdict xfer_ucx_judge(void *ctx, const unsigned char *buf, size_t n, size_t *need, char *why, size_t whyn);

/* ---- the CUDA runtime and driver, dlopen'd (xfer_cuda.c) ---- */
typedef struct { unsigned char b[64]; } xfer_cuda_ipc_handle; /* cudaIpcMemHandle_t */
typedef struct {
	int ok;
	char why[256];
	void *h_rt, *h_drv;
	int (*GetDeviceCount)(int *);
	int (*SetDevice)(int);
	int (*Malloc)(void **, size_t);
	int (*Free)(void *);
	int (*MallocHost)(void **, size_t);
	int (*FreeHost)(void *);
	int (*Memcpy)(void *, const void *, size_t, int);
	int (*MemcpyAsync)(void *, const void *, size_t, int, void *);
	int (*Memset)(void *, int, size_t);
	int (*StreamCreate)(void **);
	int (*StreamDestroy)(void *);
	int (*StreamSynchronize)(void *);
	int (*StreamQuery)(void *);
	int (*DeviceSynchronize)(void);
	int (*IpcGetMemHandle)(xfer_cuda_ipc_handle *h, void *ptr);
	int (*IpcOpenMemHandle)(void **ptr, xfer_cuda_ipc_handle h, unsigned flags);
	int (*IpcCloseMemHandle)(void *);
	const char *(*GetErrorString)(int);
	int (*MemGetAddressRange)(unsigned long long *base, size_t *size, unsigned long long ptr);
	int (*DrvInit)(unsigned);
	int (*MemGetInfo)(size_t *free, size_t *total); /* optional: NULL where the runtime lacks it */
} xfer_cuda_api;

enum { XFER_CUDA_H2H = 0, XFER_CUDA_H2D = 1, XFER_CUDA_D2H = 2, XFER_CUDA_D2D = 3 };

/* Loads libcudart once; NULL with why filled when it is missing or there is no
 * device. */
const xfer_cuda_api *xfer_cuda(char *why, size_t n);
int xfer_cuda_check(const xfer_cuda_api *cu, int rc, const char *what, xfer_err *err);
/* A non-blocking stream (cudaStreamNonBlocking), else a plain one. */
int xfer_cuda_stream_nonblocking(const xfer_cuda_api *cu, void **stream, const char *what, xfer_err *err);
/* Copies n bytes between any host/CUDA pair, choosing the kind. */
int xfer_cuda_copy(const xfer_cuda_api *cu, void *dst, xfer_mem dm, const void *src,
		   xfer_mem sm, size_t n, xfer_err *err);

/* The CUDA runtime for a tensor in CUDA memory, or NULL with the reason. */
const xfer_cuda_api *xfer_tensor_cuda(const xfer_tensor *t, xfer_err *err);
/* Checksum of a tensor wherever it lives (CUDA: staged through a host buffer). */
int xfer_tensor_checksum(const xfer_tensor *t, void *stage, size_t stage_len, xfer_sum *out,
			 xfer_err *err);

/* ---- the tree checksum (xfer_tree.c) ---- */
uint64_t xfer_tree_nchunks(uint64_t n);
/* The XXH3-64 of each chunk of p[0..n) into out[0..xfer_tree_nchunks(n)). */
void xfer_tree_chunk_hashes(const void *p, uint64_t n, uint64_t *out, int threads);
/* The second level: XXH3-128 of the chunk hashes, seeded with nbytes. */
xfer_sum xfer_tree_top(const uint64_t *h, uint64_t nchunks, uint64_t nbytes);
/* Tree checksums of count host buffers at once, chunks spread on threads. */
int xfer_tree_sums(const void *const *p, const uint64_t *n, size_t count, xfer_sum *out, int threads,
		   xfer_err *err);
/* The tree checksum of a tensor wherever it lives (CUDA: staged through
 * stage, on CPU threads). */
int xfer_tensor_tree_sum(const xfer_tensor *t, void *stage, size_t stage_len, int threads, xfer_sum *out,
			 xfer_err *err);
int xfer_tree_threads(int threads); /* 0: one per CPU, at most 16 */

/* ---- test hooks (tests only; zero in production) ---- */
typedef struct {
	long long corrupt_at;    /* sender: flip one byte at this stream offset (+1) */
	int stop_after_bucket;   /* receiver: raise SIGSTOP after this chunk (+1; p2p-tcp: half buckets) */
	int die_after_bucket;    /* sender: _exit after this chunk (+1; p2p-tcp: half buckets;
				    colocated: any value, right after the version header;
				    NCCL: while the next bucket moves, or after the last) */
	int wait_sender_gone_before; /* colocated receiver: before this bucket, wait until
					the sender's socket closes (a sender killed mid-transfer) */
	void (*disk_after_plan)(void *arg); /* receiver: between planning a chain and applying it */
	void *disk_after_plan_arg;
	/* journal: its device copies (kind XFER_CUDA_D2H or XFER_CUDA_H2D) go
	 * here instead of CUDA, so host memory can stand in for a device */
	int (*device_copy)(void *dst, const void *src, size_t n, int kind, xfer_err *err);
	int gpu_direct_loads; /* GPU hashing kernels without staged loads (to compare) */
	int gpu_fused;        /* colocated, NCCL and p2p-tcp device receivers: skein_copy_tree (one
				 pass) instead of the journal copy, then the hash (to compare) */
	uint64_t ipc_place_shift; /* colocated sender: the last tensor's place said to lie this much
				     further into its allocation (the receiver must refuse it) */
	uint64_t corrupt_version; /* sender: after checksumming this version one wrong byte goes
				     out (its own copy stays right for the next) */
	uint64_t crash_receiving_version; /* receiver: _exit(3) once the first bucket of
					     this version landed */
	const char *stall_file;  /* coordinated receiver: when this file names the version it
				    just verified, it holds its word for stall_ms (an update
				    kept open on purpose: demo, tests of a head failover) */
	int stall_ms;
	int nccl_hash_first;     /* NCCL root: hash every tensor before the header (the old
				    order), not each bucket while the one before moves */
	int nccl_cpu_hash;       /* NCCL: hash on CPU threads even where the GPU kernels load */
	int journal_scalar;      /* host journal: the scalar compare even where AVX2 runs */
	int no_openat2;          /* the disk folder: the O_NOFOLLOW walk, as on a kernel without openat2 */
} xfer_test_hooks;
extern xfer_test_hooks xfer_hooks;

#endif
