/* Bounded reads of the files the pinner trusts no more than their kind: never a symlink, a FIFO or a device,
 * never more than a limit. Each returns 0 or an errno (or E_NOT_REGULAR, E_SYMLINK from error.h), so the
 * caller words the message for what it was reading.
 */
#ifndef CMK_FILES_H
#define CMK_FILES_H

#include <stddef.h>

#include "strbuf.h"

/* Opens name (below dirfd, or AT_FDCWD) without following a final symlink and without blocking on a FIFO,
 * and keeps it only if it is a regular file (cgroup, proc and sysfs files all are). flags: O_RDONLY, or
 * O_WRONLY (checked before it is opened, so a FIFO or device is never opened for writing). Returns the fd,
 * or minus (an errno, E_NOT_REGULAR or E_SYMLINK). */
int open_regular(int dirfd, const char *name, int flags);
/* Reads all of fd (up to HOOK_MAX_JSON_BYTES) onto out; 0, or an errno (EFBIG when too big). */
int read_all(int fd, str *out);
/* Reads a whole small regular file below dirfd (or AT_FDCWD) onto out. */
int read_file_at(int dirfd, const char *path, str *out);
int read_file(const char *path, str *out);
/* Reads at most limit bytes of the regular file path into out, then drops NULs and surrounding whitespace
 * (as the daemon reads sysfs); *raw_len is the length read. */
int read_sysfs(const char *path, size_t limit, str *out, size_t *raw_len);

#endif
