/* transfer/include/skein_xfer.h: libskein, the weight-transfer library.
 *
 * A sender describes its weights as a manifest (name, dtype, shape, byte
 * size, host or CUDA pointer) and publishes version v; a receiver describes
 * where each tensor goes with a manifest of the same names, dtypes and shapes
 * and receives v.  The bytes move on one of several data paths chosen at run
 * time by name:
 *
 *   disk-delta        only what changed, through a shared folder (XOR or
 *                     overwrite encoding, optional zstd, full every K versions)
 *   p2p               p2p-ucx where UCX loads (agreed with each peer, which
 *                     may fall back to p2p-tcp), else p2p-tcp (the reason is
 *                     kept: xfer_endpoint_note)
 *   p2p-tcp           several TCP streams straight from the sender's tensors
 *   p2p-ucx           UCX one-sided puts (dlopen'd: shared memory, TCP, RDMA
 *                     where UCX finds a device)
 *   p2p-rdma          hand-written libibverbs: not implemented (its probe says so)
 *   broadcast         NCCL, one broadcast per tensor       (dlopen'd)
 *   broadcast_packed  NCCL, one packed broadcast per bucket (dlopen'd)
 *   colocated         CUDA IPC handles, device-to-device copy (dlopen'd)
 *
 * Tensors travel in buckets of cfg.bucket_bytes (Miles's
 * --update-weight-buffer-size, default 512 MiB) in manifest order; a tensor
 * larger than a bucket travels alone.  Every tensor carries the xxh3-128 of its
 * new bytes, checked on arrival.  Any failure (checksum, short read, timeout,
 * vanished peer) ends the transfer with an error on both sides.  With
 * cfg.keep_previous (the default) a receiver journals the bytes it
 * overwrites and puts them back on failure, so its previous version stays
 * intact: host memory on disk-delta and p2p-tcp, CUDA memory on p2p-tcp
 * colocated and NCCL (there in device memory, up to cfg.device_journal_bytes,
 * beyond it pinned host memory); xfer_endpoint_stats says
 * how much memory and time that took.  colocated checks tree checksums
 * computed by libskein's GPU kernels (docs/tree-checksum.md).
 *
 * Every call returns 0 or -1 and fills an xfer_err.  Nothing here needs CUDA,
 * NCCL or UCX to build or run (they are loaded with dlopen): those paths say
 * why they are unavailable. */
#ifndef SKEIN_XFER_H
#define SKEIN_XFER_H

#include <stddef.h>
#include <stdint.h>

/* What libskein.so exports: exactly the functions below (it is built with
 * -fvisibility=hidden; its other functions are internal and reach tests
 * through the static library). */
#ifndef SKEIN_API
#define SKEIN_API __attribute__((visibility("default")))
#endif

#define XFER_DEFAULT_BUCKET_BYTES (512ull << 20)
#define XFER_DEFAULT_TIMEOUT_MS 30000
#define XFER_NAME_MAX 255
#define XFER_MAX_DIMS 8
#define XFER_NCCL_ID_BYTES 128

/* ---- errors ---- */
typedef enum {
	XFER_OK = 0,
	XFER_EINVAL,    /* a bad argument or manifest */
	XFER_ENOMEM,
	XFER_EIO,       /* a system call failed */
	XFER_ECHECKSUM, /* bytes arrived but their checksum differs */
	XFER_ETIMEOUT,  /* the watchdog fired: no progress within timeout_ms */
	XFER_EPEER,     /* the peer vanished or reported an error */
	XFER_EUNAVAIL,  /* the data path cannot run here (the message says why) */
	XFER_ECHAIN,    /* disk-delta: a version missing, or from another chain */
	XFER_EFORMAT,   /* a malformed or truncated index, header or stream */
	XFER_EMISMATCH, /* sender and receiver manifests differ (name, dtype, shape) */
	XFER_EABORTED,  /* xfer_abort was called */
	XFER_ENOVERSION /* nothing new to receive within the wait */
} xfer_code;

typedef struct {
	xfer_code code;
	char msg[512];
} xfer_err;

SKEIN_API const char *xfer_code_name(xfer_code c);

/* ---- dtypes ---- */
typedef enum {
	XFER_BOOL = 0, XFER_U8, XFER_I8, XFER_I16, XFER_I32, XFER_I64,
	XFER_F16, XFER_BF16, XFER_F32, XFER_F64, XFER_F8E4M3, XFER_F8E5M2,
	XFER_DTYPE_COUNT
} xfer_dtype;

SKEIN_API size_t xfer_dtype_size(xfer_dtype dt);
SKEIN_API const char *xfer_dtype_name(xfer_dtype dt);
/* Parses "bf16", "f32", ...; returns 0 or -1. */
SKEIN_API int xfer_dtype_parse(const char *s, xfer_dtype *out);

typedef enum { XFER_MEM_HOST = 0, XFER_MEM_CUDA = 1 } xfer_mem;

/* ---- manifest ---- */
typedef struct {
	const char *name;
	xfer_dtype dtype;
	int ndim;
	int64_t shape[XFER_MAX_DIMS];
	uint64_t nbytes; /* product of shape x dtype size */
	void *ptr;       /* source (sender) or destination (receiver) */
	xfer_mem mem;
	int device;      /* CUDA device of ptr when mem is XFER_MEM_CUDA */
} xfer_tensor;

typedef struct xfer_manifest xfer_manifest;

SKEIN_API xfer_manifest *xfer_manifest_new(void);
/* Frees and sets *m to NULL; safe on NULL and twice. */
SKEIN_API void xfer_manifest_free(xfer_manifest **m);
/* Names are 1..255 printable characters without spaces, unique. */
SKEIN_API int xfer_manifest_add(xfer_manifest *m, const char *name, xfer_dtype dt, int ndim,
		      const int64_t *shape, void *ptr, xfer_mem mem, xfer_err *err);
/* Sets the CUDA device of the last tensor added (default 0). */
SKEIN_API void xfer_manifest_set_device(xfer_manifest *m, int device);
SKEIN_API size_t xfer_manifest_count(const xfer_manifest *m);
SKEIN_API uint64_t xfer_manifest_bytes(const xfer_manifest *m);
SKEIN_API const xfer_tensor *xfer_manifest_tensor(const xfer_manifest *m, size_t i);
/* Index of the tensor, or -1. */
SKEIN_API long xfer_manifest_find(const xfer_manifest *m, const char *name);
/* 0 when a and b have the same names, dtypes and shapes in the same order;
 * else -1 with XFER_EMISMATCH naming the first difference. */
SKEIN_API int xfer_manifest_compare(const xfer_manifest *a, const xfer_manifest *b, xfer_err *err);

/* ---- buckets ---- */
typedef struct {
	size_t first;   /* index of the first tensor */
	size_t count;   /* tensors in the bucket */
	uint64_t bytes; /* their bytes, back to back */
	uint64_t packed_bytes; /* with each tensor aligned to its element size */
	int alone;      /* 1: one tensor larger than a bucket */
} xfer_bucket;

/* Groups the tensors in manifest order into buckets of at most bucket_bytes
 * (0: the default); *out is malloc'd, the caller frees it. */
SKEIN_API int xfer_buckets(const xfer_manifest *m, uint64_t bucket_bytes, xfer_bucket **out,
		 size_t *n, xfer_err *err);

/* ---- checksum: xxh3-128 (libxxhash) ---- */
typedef struct {
	uint64_t lo, hi;
} xfer_sum;

SKEIN_API xfer_sum xfer_checksum(const void *p, size_t n);
SKEIN_API int xfer_sum_equal(xfer_sum a, xfer_sum b);
/* 32 hex digits and a NUL. */
SKEIN_API void xfer_sum_hex(xfer_sum s, char out[33]);
SKEIN_API int xfer_sum_parse(const char *hex, xfer_sum *out);

/* ---- the tree checksum (docs/tree-checksum.md) ----
 * XXH3-64 of every 256 KiB chunk, then the XXH3-128 (seeded with the byte
 * count) of those chunk hashes: many CPU threads or GPU blocks compute it,
 * with the same bits.  threads 0: one per CPU, at most 16. */
#define XFER_TREE_CHUNK (256u << 10)
SKEIN_API xfer_sum xfer_tree_checksum(const void *p, size_t n, int threads);

/* ---- data paths ---- */
typedef enum { XFER_SENDER = 0, XFER_RECEIVER = 1 } xfer_role;
/* What a tensor's checksum is: xxh3-128 of its bytes (one stream, the
 * default on host paths), or the tree checksum (above: the CPU threads and
 * the GPU compute it; colocated always uses it). */
typedef enum { XFER_SUM_XXH3_128 = 0, XFER_SUM_TREE = 1 } xfer_sum_kind;
typedef enum { XFER_ENC_OVERWRITE = 0, XFER_ENC_XOR = 1 } xfer_encoding;

typedef struct {
	const char *path;       /* one of the names above */
	xfer_role role;
	uint64_t bucket_bytes;  /* 0: 512 MiB */
	int timeout_ms;         /* watchdog: no progress for this long is an error */
	int keep_previous;      /* receiver: journal overwritten bytes, undo on failure */
	const char *journal_dir;/* where the undo journal spills (default $TMPDIR or /tmp) */
	struct {
		const char *dir;          /* the shared folder */
		xfer_encoding encoding;
		int zstd_level;           /* 0: no compression; 1..19 */
		int full_every;           /* a full version every K versions (K >= 1) */
		const char *receiver_id;  /* receiver: its name under dir/receivers/ ('/' become '-') */
		int gc;                   /* sender: delete what every receiver applied */
	} disk;
	struct {
		const char *host;         /* receiver: address to listen on; sender: to connect to */
		int port;                 /* receiver: 0 picks a free port (xfer_endpoint_port) */
		int streams;              /* p2p-tcp's data streams, p2p-ucx's lanes
					     (default: xfer_p2p_default_streams) */
	} p2p;
	struct {
		unsigned char id[XFER_NCCL_ID_BYTES]; /* from xfer_nccl_unique_id on the root */
		int nranks, rank, root;
		int device;               /* CUDA device of this rank */
	} nccl;
	int verify_device;      /* CUDA destinations: check checksums (copies to host) */
	int threads;            /* disk-delta encode/apply threads (0: one per CPU, at most 16) */
	xfer_sum_kind checksum; /* disk-delta sender: written into each index (a
				   tree index is format 2: older readers refuse it) */
	uint64_t device_journal_bytes; /* CUDA receiver: the undo journal's device
					  memory budget, beyond it host memory
					  (0: an eighth of the device's free
					  memory at open, at most 2x the model;
					  docs/transfer.md) */
	struct {
		const char *rpc;          /* the agent's socket, "unix:PATH" (SKEIN_RPC); NULL: not coordinated */
		const char *job, *member; /* SKEIN_JOB, SKEIN_MEMBER */
		uint64_t generation;      /* SKEIN_GENERATION: a restarted member is a new one */
	} coord;
} xfer_config;

/* Defaults: bucket 512 MiB, timeout 30 s, keep_previous 1, overwrite encoding,
 * no zstd, full every 10, gc on, xfer_p2p_default_streams() streams, host
 * 127.0.0.1, verify_device 1, not coordinated. */
SKEIN_API void xfer_config_init(xfer_config *c);
/* Half the online CPUs, at least 4 and at most 8: each stream (lane) is a
 * thread on both ends that copies, hashes and journals its stripe, so a
 * host with cores to spare moves a version faster with more of them (on
 * the H200 host's 16 cores, 2 GiB: p2p-tcp 0.42 s with 4, 0.28 s with 8;
 * p2p-ucx over shared memory 0.23 s and 0.13 s). */
SKEIN_API int xfer_p2p_default_streams(void);
/* xfer_config_init, then what the member's agent put in its environment:
 *   SKEIN_TRANSFER_MODE -> path            SKEIN_BUFFER_SIZE -> bucket_bytes
 *   SKEIN_DISK_DIR -> disk.dir             SKEIN_UPDATE_TIMEOUT_MS -> timeout_ms
 *   SKEIN_RPC, SKEIN_JOB, SKEIN_MEMBER, SKEIN_GENERATION -> coord
 *   SKEIN_MEMBER -> disk.receiver_id       SKEIN_NODE_ADDR -> p2p.host (a
 *   receiver listens there on a free port; absent: 127.0.0.1)
 * SKEIN_COORDINATE=0: all but the coordination (coord.rpc NULL: polls, as
 * outside a job).
 * Outside a job (SKEIN_JOB unset): -1 XFER_EINVAL "not inside a skein job".
 * A variable set to a bad value: -1 XFER_EINVAL naming it.  The strings
 * point into the environment: keep it unchanged while c is used (xfer_open
 * copies them). */
SKEIN_API int xfer_config_from_env(xfer_config *c, xfer_role role, xfer_err *err);

/* The names of the data paths, NULL-terminated. */
SKEIN_API const char *const *xfer_path_names(void);
/* 0 when the path can run here; -1 with the reason in why. */
SKEIN_API int xfer_probe(const char *path, char *why, size_t why_len);

typedef struct xfer_endpoint xfer_endpoint;

typedef struct {
	uint64_t version;        /* the last version sent or received */
	uint64_t bytes_moved;    /* bytes written to disk or sent/received, last version */
	double seconds;          /* wall time of the last version */
	double data_seconds;     /* of which moving the bytes alone (no checksums).
				    NCCL: issuing the broadcasts and waiting for them
				    after this side's hashing; a receiver's unpack.
				    NCCL's data, hash and journal seconds are disjoint
				    parts of seconds (no second counted twice) */
	uint64_t staging_peak;   /* largest staging memory held at once (bytes) */
	uint64_t journal_bytes;  /* undo journal of the last version (bytes) */
	double journal_seconds;  /* p2p-tcp receiver: of seconds, journaling (the
				    slowest stream's host journal, plus the device
				    pass that copies, journals and hashes).
				    NCCL receiver after its first version: copying each
				    bucket from staging through the journal (GPU: the one
				    pass that also hashes counts here whole) */
	double undo_seconds;     /* p2p-tcp receiver: putting the previous version
				    back after the last version failed */
	uint64_t versions_applied; /* disk-delta receiver: versions applied last time */
	int full_loaded;         /* disk-delta receiver: caught up from a full version */
	double hash_seconds;     /* colocated, p2p-tcp: of seconds, computing tree
				    checksums (GPU or CPU threads, this side;
				    colocated: the sender's comes back too).
				    NCCL root: hashing every bucket, including the
				    time a broadcast moved meanwhile (bucket b+1 is
				    hashed while b moves: a move hidden behind it
				    counts here, not in data); receiver: checking each
				    bucket as it lands */
	uint64_t device_journal_peak;    /* CUDA receiver: device memory the undo
					    journal held (bounded by its budget) */
	uint64_t device_journal_spilled; /* of journal_bytes, spilled to pinned host memory */
} xfer_stats;

/* Probes, then sets the path up.  The manifest is borrowed: it must outlive
 * the endpoint and keep its pointers valid.  Coordinated (cfg.coord.rpc set,
 * docs/updates.md): a p2p, p2p-tcp or colocated sender connects to the
 * receivers the head names at each version instead (cfg.p2p.port unused); a
 * receiver listens as usual (p2p: on cfg.p2p.host, port 0 allowed) and
 * tells the head its endpoint "host:port" on every wait. */
SKEIN_API int xfer_open(xfer_endpoint **out, const xfer_config *cfg, const xfer_manifest *m,
	      xfer_err *err);
/* Sender: publishes the manifest's current bytes as version v (v > 0,
 * increasing).  Returns when every receiver on the path has it (p2p, NCCL,
 * colocated) or when it is durably in the folder (disk-delta).
 * Coordinated: xfer_publish(ep, version, NULL, err). */
SKEIN_API int xfer_send(xfer_endpoint *ep, uint64_t version, xfer_err *err);
/* Receiver: waits up to wait_ms (-1: forever) for a version newer than the
 * one it holds and receives it into the manifest's buffers.
 * Coordinated: runs the engine loop of docs/updates.md (wait, receive,
 * verify, report; catch up or serve a peer when told) and returns only a
 * committed version: *version is one the head committed, and only now may
 * the caller serve it.  XFER_ENOVERSION when wait_ms passed with nothing
 * committed; XFER_EABORTED when the head aborted an update this endpoint had
 * received (or was receiving): its buffers are back on the version it held
 * (xfer_endpoint_update says which update and why); call again to go on. */
SKEIN_API int xfer_receive(xfer_endpoint *ep, int wait_ms, uint64_t *version, xfer_err *err);

/* ---- coordinated updates (docs/updates.md) ----
 * Miles's metric names per version: update_seconds is
 * perf/update_weights_time (the publish call to the head's verdict),
 * implementation_seconds perf/update_weights_implementation_time (the
 * data path's part), wire_bytes perf/update_weights_wire_bytes, density
 * perf/update_weights_density (disk-delta: stored / total bytes). */
/* Where a data path spent a version's time (from xfer_stats): moving the
 * bytes (journaling included), hashing, journaling, putting the previous
 * version back (a receiver that failed the version itself). */
typedef struct {
	double data_seconds, hash_seconds, journal_seconds, undo_seconds;
} xfer_timings;

typedef struct {
	uint64_t version;
	char state[16];          /* committed or aborted ("" before any) */
	char reason[512];        /* aborted: the member and the cause */
	double update_seconds, implementation_seconds;
	uint64_t wire_bytes;
	double density;
	uint32_t participants, dropped; /* engines in the update, of them dropped */
	xfer_timings timings;    /* this side's split: the sender's (publish), the engine's own receive */
	xfer_timings engines;    /* sender: each figure's largest over the participants' verdicts (the record's) */
} xfer_update_stats;

/* Sender: publishes version v as one transaction of the job (begin, move
 * the bytes, done) and returns the head's verdict: 0 when committed (every
 * participant verified v; st filled when not NULL), -1 XFER_EABORTED with
 * the head's reason when aborted (disk-delta then removes v from the
 * folder and writes the next version in full).  Not coordinated: xfer_send,
 * with st from its own figures. */
SKEIN_API int xfer_publish(xfer_endpoint *ep, uint64_t version, xfer_update_stats *st, xfer_err *err);
/* The last publish's outcome (sender) or the last commit or abort seen
 * (receiver); zeros before any. */
SKEIN_API xfer_update_stats xfer_endpoint_update(const xfer_endpoint *ep);
/* A coordinated sender: the newest version its job ever began (committed
 * or not; 0: none), asked of the head.  A restarted trainer numbers its next
 * version above it (versions only grow, an aborted one is spent).
 * XFER_EINVAL on an endpoint that is not coordinated. */
SKEIN_API int xfer_job_newest(xfer_endpoint *ep, uint64_t *newest, xfer_err *err);
/* Receiver: puts back the version it held before its last receive, from
 * that receive's undo journal (disk-delta, p2p-tcp, p2p-ucx, colocated with
 * the GPU kernels, broadcast and broadcast_packed, keep_previous on).  -1
 * XFER_EUNAVAIL where there is none (the first version received,
 * keep_previous off, rolled back already). */
SKEIN_API int xfer_rollback(xfer_endpoint *ep, xfer_err *err);
/* From any thread: makes a blocked send/receive return XFER_EABORTED. */
SKEIN_API void xfer_abort(xfer_endpoint *ep);
/* Frees and sets *ep to NULL; safe on NULL and twice. */
SKEIN_API void xfer_close(xfer_endpoint **ep);

SKEIN_API const char *xfer_endpoint_path(const xfer_endpoint *ep);  /* the path that runs */
SKEIN_API const char *xfer_endpoint_note(const xfer_endpoint *ep);  /* why it fell back, or "" */
SKEIN_API int xfer_endpoint_port(const xfer_endpoint *ep);          /* p2p/colocated receiver */
SKEIN_API xfer_stats xfer_endpoint_stats(const xfer_endpoint *ep);

/* ---- p2p: who may open a session (issue 23) ----
 * A ticket is the job, the version and a 128-bit nonce the head drew for
 * that update or catch-up.  A p2p-tcp / p2p-ucx sender puts its ticket in
 * its hello; a receiver given one reads every connection's hello
 * concurrently (each within 2 s) and refuses, before reading any data,
 * every connection whose hello does not carry the same ticket: it is
 * answered, closed, logged on stderr in one line and counted
 * (xfer_p2p_refused).  Without a ticket a receiver takes any sender of its
 * wire, still never stalled by a silent connection.  Coordinated endpoints
 * get theirs from the head (BeginReply.nonce, Instruction.nonce): call this
 * only outside a coordinated job.  nonce NULL: no ticket. */
#define XFER_NONCE_BYTES 16
SKEIN_API int xfer_p2p_ticket(xfer_endpoint *ep, const char *job, uint64_t version, const unsigned char *nonce,
		    xfer_err *err);
/* Receiver: connections refused so far (a bad or missing ticket, a hello
 * that never came or another wire). */
SKEIN_API uint64_t xfer_p2p_refused(const xfer_endpoint *ep);

/* ---- disk-delta extras ---- */
/* Deletes versions that every receiver listed in dir/receivers/ has applied
 * and that no catch-up needs (those before the newest full version they all
 * passed); keeps at least keep_newest versions.  *deleted may be NULL. */
SKEIN_API int xfer_disk_gc(const char *dir, int keep_newest, int *deleted, xfer_err *err);
/* The newest published version in dir (0 when none). */
SKEIN_API int xfer_disk_latest(const char *dir, uint64_t *version, xfer_err *err);

/* ---- NCCL ---- */
/* On the root rank: a fresh 128-byte unique id for the others (to carry out
 * of band, e.g. over the control channel). */
SKEIN_API int xfer_nccl_unique_id(unsigned char id[XFER_NCCL_ID_BYTES], xfer_err *err);

/* ---- stock engines: checkpoint-engine's ZeroMQ socket (transfer/engine/) ----
 * The few libzmq calls the engine protocol needs (docs/engines.md), for the
 * engine sidecar and test receivers: libzmq.so.5 is loaded at first use
 * (SKEIN_ZMQ_LIB overrides), so a host without pyzmq still speaks it.  rep
 * 0: a REQ socket that binds addr (the sender); 1: a REP that connects.
 * Every call waits at most timeout_ms.  eng_zmq_recv returns the message's
 * length (-1 on error), its bytes readable at eng_zmq_data until the next
 * receive or close.  Errors: -1 with err. */
typedef struct eng_zmq eng_zmq;
SKEIN_API int eng_zmq_open(eng_zmq **out, int rep, const char *addr, int timeout_ms, char *err, size_t errlen);
SKEIN_API int eng_zmq_send(eng_zmq *z, const void *buf, size_t len, char *err, size_t errlen);
SKEIN_API long long eng_zmq_recv(eng_zmq *z, char *err, size_t errlen);
SKEIN_API const void *eng_zmq_data(eng_zmq *z);
SKEIN_API void eng_zmq_close(eng_zmq **z);

#endif
