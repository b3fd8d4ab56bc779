/* agent/agent_opts: skeind's settings from flags, environment and a config
 * file.  Precedence: built-in defaults < config file < SKEIN_* environment
 * < command-line flags.  Every flag has the same name in the three places:
 *   --log-level debug   |   SKEIN_LOG_LEVEL=debug   |   log-level = debug
 * Repeatable flags (--join, --tag, --set) accumulate; in the environment they
 * are comma-separated (SKEIN_JOIN=a:1,b:2).  Tags are checked here (KEY=VALUE,
 * printable UTF-8, bounded): a bad one fails the parse or the reload. */
#ifndef AGENT_OPTS_H
#define AGENT_OPTS_H

#include <stdbool.h>
#include <stddef.h>

enum {
	OPTS_LIST_MAX = 64,
	OPTS_STR = 256,
	OPTS_TAG_KEY_MAX = 64,     /* a tag's key and value, in bytes: KEY=VALUE fits OPTS_STR */
	OPTS_TAG_VALUE_MAX = 190,
};

typedef struct {
	char name[OPTS_STR];
	char bind[OPTS_STR];
	char advertise[OPTS_STR];
	char rpc[OPTS_STR];
	char data_dir[OPTS_STR];
	char profile[32];
	char gpus[16];            /* a number or "auto" */
	char key_file[OPTS_STR];
	char log_level[16];
	char log_format[16];
	char config[OPTS_STR];
	char control_socket[OPTS_STR];
	char operator_key_file[OPTS_STR];
	char operator_read_key_file[OPTS_STR];
	char operator_group[64];
	bool insecure;
	bool enable_debug;
	bool head_eligible;
	char bootstrap_expect[16];   /* a number; "0" = never bootstrap */
	char voter_replace_after[16];/* seconds; "0" = never replace automatically */
	char metrics[OPTS_STR];      /* IP:PORT of GET /metrics; "" = off */
	char member_fence_after[16]; /* seconds without an order from a head before members stop; "0" = never */
	char *join[OPTS_LIST_MAX];
	int njoin;
	char *tag[OPTS_LIST_MAX];  /* "k=v" */
	int ntag;
	char *set[OPTS_LIST_MAX];  /* membership overrides "key=value" */
	int nset;
} agent_opts;

void agent_opts_defaults(agent_opts *o);
void agent_opts_free(agent_opts *o);
/* Parses argv, then the config file it names (or SKEIN_CONFIG), then the
 * environment, honouring the precedence above.  Returns 0, 1 when --help or
 * --version was printed, or -1 with a one-line message in err (usage error). */
int agent_opts_parse(agent_opts *o, int argc, char **argv, char *err, size_t errlen);
/* Re-reads only the tags and log level from the config file and the
 * environment (SIGHUP); flags given on the command line still win. */
int agent_opts_reload(agent_opts *o, char *err, size_t errlen);
void agent_opts_usage(void);

#endif
