/* common/sk_file: writing a small file so that a crash leaves the old one
 * or the new one, never a mix: NAME.tmp, write, fsync, rename over NAME,
 * fsync of the folder.  The agent's generation and keyring and Raft's hard
 * state, log rewrite and snapshot all go through it. */
#ifndef SK_FILE_H
#define SK_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Writes dir/name atomically with `mode` (O_NOFOLLOW: a planted link is
 * refused).  fsync_on false skips the fsyncs (tests, and Raft's storage
 * when asked).  -1 with "cannot write|rename PATH: reason" in err. */
int sk_file_write_atomic(const char *dir, const char *name, const void *data, size_t len, mode_t mode,
			 bool fsync_on, char *err, size_t errlen);

#endif
