/* agent/agent_files: the folders and files skeind keeps for itself (member
 * logs, its state, the default control socket's folder).
 *
 * Every one is opened relative to a folder already checked, never through a
 * symbolic link (O_NOFOLLOW at each step), and a folder is used only when it
 * is ours: owned by our effective uid and not a link.  Folders we make are
 * 0700 and files 0600 whatever the umask; one of ours found with group or
 * other bits (a data dir made by an older skeind, or by a DaemonSet's
 * hostPath) gets its mode fixed.  A folder another user owns is refused with
 * a one-line reason: nobody else may plant what we write through. */
#ifndef AGENT_FILES_H
#define AGENT_FILES_H

#include <stdbool.h>
#include <stddef.h>

/* The folder `name` under dirfd (AT_FDCWD: name is a path), created 0700
 * when missing and `create`; an O_DIRECTORY fd, or -1 with why. */
int agent_dir_open_at(int dirfd, const char *name, bool create, char *why, size_t wl);
/* The folder at `path`, its missing parents created 0700 (parents that exist
 * are not checked: they are the operator's), itself checked as above. */
int agent_dir_open(const char *path, bool create, char *why, size_t wl);
/* The regular file `name` under dirfd, opened with flags | O_NOFOLLOW |
 * O_CLOEXEC (O_CREAT makes it 0600); a file of ours with group or other
 * bits is set to 0600.  -1 with why otherwise (a link, not a file, not ours). */
int agent_file_open_at(int dirfd, const char *name, int flags, char *why, size_t wl);

/* skeind's private folder: the data dir when given (created 0700 if
 * missing, otherwise the operator's: taken as it is); else $XDG_RUNTIME_DIR/skeind-NAME when that folder is ours and
 * 0700; else, for root, /run/skeind-NAME; else a new folder made by mkdtemp
 * in $TMPDIR (or /tmp).  NAME is the node name with anything but
 * [A-Za-z0-9_.-] as '_'. */
int agent_run_dir_pick(const char *name, const char *data_dir, char *out, size_t cap, char *why, size_t wl);

#endif
