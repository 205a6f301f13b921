/* Bounded reads of regular files (files.h). */
#define _GNU_SOURCE
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmk_generated.h"
#include "error.h"

int open_regular(int dirfd, const char *name, int flags)
{
    struct stat st;
    if (flags != O_RDONLY) {
        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW))
            return -errno;
        if (S_ISLNK(st.st_mode))
            return -E_SYMLINK;
        if (!S_ISREG(st.st_mode))
            return -E_NOT_REGULAR;
    }
    int fd = openat(dirfd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return errno == ELOOP ? -E_SYMLINK : -errno;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return -E_NOT_REGULAR;
    }
    return fd;
}

int read_all(int fd, str *out)
{
    char buf[65536];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno;
        if (n == 0)
            break;
        if (out->len + (size_t)n > HOOK_MAX_JSON_BYTES)
            return EFBIG;
        s_addn(out, buf, (size_t)n);
    }
    if (!out->p)
        s_addn(out, "", 0);
    return 0;
}

int read_file_at(int dirfd, const char *path, str *out)
{
    int fd = open_regular(dirfd, path, O_RDONLY);
    if (fd < 0)
        return -fd;
    int e = read_all(fd, out);
    close(fd);
    return e;
}

int read_file(const char *path, str *out)
{
    return read_file_at(AT_FDCWD, path, out);
}

int read_sysfs(const char *path, size_t limit, str *out, size_t *raw_len)
{
    int fd = open_regular(AT_FDCWD, path, O_RDONLY);
    if (fd < 0)
        return -fd;
    s_reserve(out, limit);
    while (out->len < limit) {
        ssize_t n = read(fd, out->p + out->len, limit - out->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            close(fd);
            return e;
        }
        if (n == 0)
            break;
        out->len += (size_t)n;
    }
    close(fd);
    *raw_len = out->len;
    size_t kept = 0;
    for (size_t i = 0; i < out->len; i++)
        if (out->p[i])
            out->p[kept++] = out->p[i];
    char *t = out->p, *end = out->p + kept;
    while (t < end && is_space(*t))
        t++;
    while (end > t && is_space(end[-1]))
        end--;
    out->len = (size_t)(end - t);
    memmove(out->p, t, out->len);
    out->p[out->len] = '\0';
    return 0;
}
