/* jobs/job_spec: an RL job as Miles's users write it.
 *
 * The flag names and defaults are Miles's (docs/reference.md, Placement):
 *   --actor-num-nodes 1, --actor-num-gpus-per-node 8, --rollout-num-gpus 0,
 *   --rollout-num-gpus-per-engine 1, --num-gpus-per-node 8, --colocate,
 *   --update-weight-transfer-mode broadcast, --update-weight-buffer-size 512MiB,
 *   --update-weight-disk-dir;
 * and skein's: --name, --trainer-cmd, --rollout-cmd, --max-restarts 10,
 * --restart-backoff MIN:MAX (1s:30s), --stop-grace 5s; for coordinated
 * weight updates (#13) --update-weight-timeout 60s (no progress for this
 * long aborts an update; at least 1s) and --update-on-engine-loss drop|abort
 * (drop: an update goes on without an engine that is lost; abort: it fails).
 * A YAML file (--file job.yaml, libyaml) holds the same keys without the
 * leading dashes (`actor-num-nodes: 2`; underscores accepted too); flags
 * given after --file override it.
 *
 * Parsing happens in skeinctl (the file is on the operator's machine); the
 * head decodes and validates again, since the bytes came off the network. */
#ifndef JOB_SPEC_H
#define JOB_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
	JOB_NAME_MAX = 63,       /* [A-Za-z0-9_.-], starts with a letter or digit */
	JOB_CMD_MAX = 4096,
	JOB_DIR_MAX = 512,
	JOB_GPUS_PER_NODE_MAX = 64,
	JOB_NODES_MAX = 4096,
	JOB_UPDATE_TIMEOUT_MS = 60000,       /* --update-weight-timeout's default */
	JOB_UPDATE_TIMEOUT_MIN_MS = 1000,    /* shorter would abort updates still moving */
};

#define JOB_ENGINE_LOSS_DEFAULT "drop"   /* --update-on-engine-loss's default */

typedef struct {
	char name[JOB_NAME_MAX + 1];      /* "" = the head names it job-<seq> */
	uint32_t actor_num_nodes;
	uint32_t actor_num_gpus_per_node;
	uint32_t rollout_num_gpus;
	uint32_t rollout_num_gpus_per_engine;
	uint32_t num_gpus_per_node;
	bool colocate;
	char transfer_mode[32];           /* broadcast broadcast_packed p2p disk-delta colocated */
	uint64_t buffer_size;             /* bytes */
	char disk_dir[JOB_DIR_MAX];
	char trainer_cmd[JOB_CMD_MAX];
	char rollout_cmd[JOB_CMD_MAX];
	int32_t max_restarts;             /* 0: never restart */
	uint32_t backoff_min_ms, backoff_max_ms;
	uint32_t stop_grace_ms;
	uint32_t update_timeout_ms;       /* --update-weight-timeout; >= JOB_UPDATE_TIMEOUT_MIN_MS */
	char on_engine_loss[8];           /* --update-on-engine-loss: drop | abort */
	/* issue 24, docs/engines.md: stock engines behind skein's sidecar */
	char rollout_engine[8];           /* --rollout-engine: skein | sglang | vllm */
	char pause_mode[12];              /* --pause-generation-mode: abort | retract | in_place */
	char engine_layout[JOB_DIR_MAX];  /* --rollout-engine-layout: the weights' JSON layout */
} job_spec;

void job_spec_defaults(job_spec *s);

/* Reads flags (argv[0] is the first flag, not a program name), in any order,
 * `--flag value` or `--flag=value`; --file PATH loads YAML at that point.
 * Sizes take K/M/G/KiB/MiB/GiB suffixes; durations ms/s/m (bare = seconds).
 * -1 and one line naming the flag on unknown flags, missing or bad values. */
int job_spec_parse_args(job_spec *s, int argc, char **argv, char *err, size_t errlen);
int job_spec_parse_yaml(job_spec *s, const char *path, char *err, size_t errlen);
/* The same from len bytes in memory (name stands for the file in errors). */
int job_spec_parse_yaml_buf(job_spec *s, const char *name, const uint8_t *buf, size_t len, char *err,
			    size_t errlen);

/* The rules, each error naming the flag (--rollout-num-gpus: 6 is not a
 * multiple of --rollout-num-gpus-per-engine 4; --update-weight-transfer-mode
 * broadcast_packed cannot be used with --colocate; disk-delta needs
 * --update-weight-disk-dir; an engine wider than a node; a trainer without
 * --trainer-cmd; ...).  With --colocate the rollout GPU count is forced to
 * the actor's (as Miles does) before the checks. */
int job_spec_validate(job_spec *s, char *err, size_t errlen);

/* --update-weight-disk-dir as hostile input (issue 23 item 2): the agents
 * write, rename and remove there as root.  job_disk_dir_check refuses `/`
 * and anything inside /etc /usr /bin /sbin /lib* /boot /proc /sys /dev,
 * /var/lib/skein or data_dir (NULL or "": none), judged after lexical
 * normalization (., .., //) and again after realpath of the folder, or of
 * its nearest existing parent, on this host.  0, or -1 and one line.
 * An empty dir is fine (no folder). */
int job_disk_dir_check(const char *dir, const char *data_dir, char *err, size_t errlen);
/* A warning (1, text in out) when the folder or one of its parents is
 * writable by users other than uid and root (the folder at all; a parent
 * without the sticky bit, which lets them swap the folder), or is owned by
 * another user; 0 when none (or the folder is not there to judge). */
int job_disk_dir_warning(const char *dir, unsigned uid, char *out, size_t outlen);
/* Lexical normalization of an absolute path into out: -1 when it does not
 * fit or is not absolute. */
int job_path_normalize(const char *in, char *out, size_t outlen);

/* Member counts of a valid spec. */
uint32_t job_spec_trainer_ranks(const job_spec *s);  /* actor nodes x GPUs per node */
uint32_t job_spec_engines(const job_spec *s);        /* rollout GPUs / GPUs per engine */
uint32_t job_spec_slots(const job_spec *s);          /* split: A + R; colocated: max(A, R) */

/* protobuf (proto/jobs.proto JobSpec): jobs/job_codec.h. */

/* "train", "1s", "512MiB" parsers shared with other flag readers. */
int job_parse_size(const char *v, uint64_t *out);
int job_parse_duration_ms(const char *v, uint32_t *out);
bool job_name_ok(const char *name);

#endif
