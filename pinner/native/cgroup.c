/* The container's cgroups (cgroup.h). */
#define _GNU_SOURCE
#include "cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmk_generated.h"
#include "files.h"
#include "systemd.h"

int cpus_of_text(const str *text, cpuset *cpus)
{
    str detail = {0};
    int bad = memchr(text->p, 0, text->len) || parse_cpu_list(text->p, text->len, CPU_LIST_KERNEL, cpus, &detail);
    free(detail.p);
    return bad ? -1 : 0;
}

int cgroup_error(int status, const char *path, const char *what, int e, cmk_error *err)
{
    s_add(&err->msg, what);
    s_shown(&err->msg, path);
    s_add(&err->msg, ": ");
    s_errno(&err->msg, e);
    return cmk_fail(err, status);
}

/* Finds the process's cgroup of controller ctl (cpuset, cpu): the v1 line naming ctl, else the v2 "0::" line. */
int find_cgroup(const char *proc_root, long pid, const char *ctl, struct cgroup *cg, cmk_error *err)
{
    size_t ctl_len = strlen(ctl);
    str path = {0}, text = {0};
    s_addf(&path, "%s/%ld/cgroup", proc_root, pid);
    int e = read_file(path.p, &text);
    if (e == ENOENT || e == ESRCH) {
        s_addf(&err->msg, "the container's process %ld is gone (", pid);
        s_shown(&err->msg, path.p);
        s_add(&err->msg, " does not exist): it exited before its start hook ran");
        return cmk_fail(err, HOOK_EXIT_GONE);
    }
    if (e)
        return cgroup_error(HOOK_EXIT_NO_CGROUP, path.p, "cannot read ", e, err);
    const char *v2 = NULL, *v1 = NULL;
    size_t v2_len = 0, v1_len = 0;
    for (char *line = text.p; line && *line;) {
        char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        char *c1 = memchr(line, ':', n);
        char *c2 = c1 ? memchr(c1 + 1, ':', n - (size_t)(c1 + 1 - line)) : NULL;
        if (c2) {
            const char *rest = c2 + 1;
            size_t rest_len = n - (size_t)(rest - line);
            if (c1 == line + 1 && line[0] == '0' && c2 == c1 + 1) {
                v2 = rest;
                v2_len = rest_len;
            }
            for (const char *c = c1 + 1; c < c2;) { /* the comma-separated controllers */
                const char *comma = memchr(c, ',', (size_t)(c2 - c));
                const char *stop = comma ? comma : c2;
                if ((size_t)(stop - c) == ctl_len && !memcmp(c, ctl, ctl_len)) {
                    v1 = rest;
                    v1_len = rest_len;
                }
                c = stop + 1;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    if (!v1 && !v2) {
        s_addf(&err->msg, "process %ld is in no %s cgroup (", pid, ctl);
        s_shown(&err->msg, path.p);
        s_addf(&err->msg, " has neither a %s nor a 0:: line): the kernel needs the %s controller", ctl, ctl);
        return cmk_fail(err, HOOK_EXIT_NO_CGROUP);
    }
    cg->v2 = !v1;
    s_addn(&cg->path, v1 ? v1 : v2, v1 ? v1_len : v2_len);
    return 0;
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape_octal(str *s, const char *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (t[i] == '\\' && i + 3 < n && t[i + 1] >= '0' && t[i + 1] <= '3' &&
            t[i + 2] >= '0' && t[i + 2] <= '7' && t[i + 3] >= '0' && t[i + 3] <= '7') {
            char c = (char)((t[i + 1] - '0') * 64 + (t[i + 2] - '0') * 8 + (t[i + 3] - '0'));
            s_addn(s, &c, 1);
            i += 3;
        } else {
            s_addn(s, &t[i], 1);
        }
    }
}

/* Splits a mountinfo line into fields at spaces; returns how many (at most max). */
static size_t split_fields(char *line, char **fields, size_t max)
{
    size_t n = 0;
    for (char *p = line; *p && n < max;) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        fields[n++] = p;
        while (*p && *p != ' ')
            p++;
        if (*p)
            *p++ = '\0';
    }
    return n;
}

/* The mount point of the hierarchy holding cg (v1: the one of controller ctl), from mountinfo, joined with
 * cg's path into cg->dir. */
int find_mount(const char *proc_root, long pid, const char *ctl, struct cgroup *cg, cmk_error *err)
{
    size_t ctl_len = strlen(ctl);
    str path = {0}, text = {0};
    s_add(&path, proc_root);
    s_add(&path, "/self/mountinfo");
    int e = read_file(path.p, &text);
    if (e)
        return cgroup_error(HOOK_EXIT_NO_CGROUP, path.p, "cannot read ", e, err);
    for (char *line = text.p; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        char *f[64];
        size_t n = split_fields(line, f, 64);
        size_t dash = 6;
        while (dash < n && strcmp(f[dash], "-"))
            dash++;
        if (dash + 3 < n) { /* after "-": fstype, source, super options */
            const char *fstype = f[dash + 1], *super = f[dash + 3];
            int match = 0;
            if (cg->v2) {
                match = !strcmp(fstype, "cgroup2");
            } else if (!strcmp(fstype, "cgroup")) {
                for (const char *o = super; *o;) {
                    const char *comma = strchr(o, ',');
                    size_t len = comma ? (size_t)(comma - o) : strlen(o);
                    if (len == ctl_len && !memcmp(o, ctl, ctl_len))
                        match = 1;
                    o += len + (comma ? 1 : 0);
                }
            }
            if (match) {
                str root = {0}, mnt = {0};
                unescape_octal(&root, f[3], strlen(f[3]));
                unescape_octal(&mnt, f[4], strlen(f[4]));
                /* a mount of a sub-tree (root not "/") shows the paths below its root */
                const char *rel = cg->path.p;
                if (strcmp(root.p, "/")) {
                    size_t rn = root.len;
                    if (strncmp(rel, root.p, rn) || (rel[rn] && rel[rn] != '/'))
                        goto next;
                    rel += rn;
                }
                s_addn(&cg->dir, mnt.p, mnt.len);
                s_add(&cg->dir, rel);
                return 0;
            }
        }
    next:
        line = nl ? nl + 1 : NULL;
    }
    s_addf(&err->msg, "no %s%s hierarchy holding process %ld's cgroup ", cg->v2 ? "cgroup2" : "cgroup v1 ",
           cg->v2 ? "" : ctl, pid);
    s_shown(&err->msg, cg->path.p);
    s_add(&err->msg, " is mounted (read ");
    s_shown(&err->msg, path.p);
    s_add(&err->msg, "): mount it, or name it with --cgroup-root");
    return cmk_fail(err, HOOK_EXIT_NO_CGROUP);
}

/* Writes text to the cgroup file name below dirfd in one write(2); file is its path for messages. */
int write_cgroup_file(int dirfd, const char *name, const char *file, const char *text, const char *what,
                      int status, cmk_error *err)
{
    size_t len = strlen(text);
    int fd = open_regular(dirfd, name, O_WRONLY | O_TRUNC);
    if (fd < 0)
        return cgroup_error(status, file, what, -fd, err);
    ssize_t n;
    do
        n = write(fd, text, len);
    while (n < 0 && errno == EINTR);
    int e = n < 0 ? errno : (size_t)n != len ? EIO : 0;
    if (close(fd) && !e)
        e = errno;
    if (e)
        return cgroup_error(status, file, what, e, err);
    return 0;
}

int write_cpus(int dirfd, const char *file, const cpuset *cpus, cmk_error *err)
{
    str list = {0};
    s_ranges(&list, cpus);
    s_add(&list, "\n");
    return write_cgroup_file(dirfd, "cpuset.cpus", file, list.p, "cannot write the container's CPUs to ",
                             HOOK_EXIT_CGROUP_WRITE, err);
}

/* Removes the CFS quota of the container's own cpu cgroup (v1 cpu.cfs_quota_us = -1; v2 cpu.max = max,
 * its period kept): it holds only exclusive cores, which nobody else runs on, so a quota only throttles
 * its bursts. The pod's cgroup (the parent) is left as the kubelet set it. A cgroup without the file has
 * no cpu controller, so no quota to remove. */
int remove_quota(const char *proc_root, long pid, const struct cgroup *cpuset_cg, cmk_error *err)
{
    struct cgroup cg = {0};
    int status;
    if (cpuset_cg->v2) {
        cg = *cpuset_cg; /* one unified hierarchy: the same directory */
    } else if ((status = find_cgroup(proc_root, pid, "cpu", &cg, err)) || (status = find_mount(proc_root, pid, "cpu", &cg, err))) {
        return status;
    }
    if (!strcmp(cg.path.p, "/") || !*cg.path.p) {
        s_addf(&err->msg, "process %ld is in the root cpu cgroup: refusing to change the whole host's CFS quota", pid);
        return cmk_fail(err, HOOK_EXIT_QUOTA);
    }
    const char *name = cg.v2 ? "cpu.max" : "cpu.cfs_quota_us";
    str file = {0};
    s_add(&file, cg.dir.p);
    s_add(&file, "/");
    s_add(&file, name);
    int dirfd = open(cg.dir.p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0)
        return cgroup_error(HOOK_EXIT_QUOTA, cg.dir.p, "cannot open the container's cpu cgroup ",
                            errno == ELOOP ? E_SYMLINK : errno, err);
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) && errno == ENOENT) {
        close(dirfd);
        return 0;
    }
    status = systemd_record(cg.path.p, NULL, 1, err);
    if (!status)
        status = write_cgroup_file(dirfd, name, file.p, cg.v2 ? "max\n" : "-1\n",
                               "cannot remove the CFS quota of the container's exclusive cores in ", HOOK_EXIT_QUOTA, err);
    close(dirfd);
    return status;
}

/* The CPUs a cgroup file below dirfd holds; 0, or -1 when it is missing, unreadable, empty or no cpu list. */
int read_cpus_at(int dirfd, const char *name, cpuset *cpus)
{
    str text = {0};
    int bad = read_file_at(dirfd, name, &text) || cpus_of_text(&text, cpus);
    free(text.p);
    return bad || cs_empty(cpus) ? -1 : 0;
}

/* Writes cpus to the cpuset.cpus below dirfd where a failure is no refusal (the caller goes on as before):
 * 0, or -1 with the cgroup as it was. */
int try_write_cpus(int dirfd, const cpuset *cpus)
{
    str list = {0};
    s_ranges(&list, cpus);
    s_add(&list, "\n");
    int fd = open_regular(dirfd, "cpuset.cpus", O_WRONLY | O_TRUNC);
    int bad = fd < 0 || write_all(fd, list.p, list.len);
    if (fd >= 0 && close(fd))
        bad = 1;
    free(list.p);
    return bad ? -1 : 0;
}

/* A container one of whose other cmk hook entries already ran (a container holding several CDI devices runs
 * one hook per device) has its processes in HOOK_CONFINED_CGROUP: it is confined again from its own cgroup,
 * that cgroup's parent, so running twice stays idempotent. */
void container_cgroup(struct cgroup *cg)
{
    static const char leaf[] = "/" HOOK_CONFINED_CGROUP;
    size_t n = sizeof leaf - 1;
    str *parts[] = {&cg->path, &cg->dir};
    for (size_t i = 0; i < 2; i++) {
        str *s = parts[i];
        if (s->len > n && !strcmp(s->p + s->len - n, leaf))
            s->p[s->len -= n] = '\0';
    }
}
