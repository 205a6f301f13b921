/* The container's cgroup, its processes' bound and the pod's (confine.h). */
#define _GNU_SOURCE
#include "confine.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmk_generated.h"
#include "files.h"
#include "systemd.h"

/* The parent's path for messages: cg->dir without its last component (the directory itself is read
 * through "..", so this text never decides what is opened). */
static void parent_path(const char *dir, str *out)
{
    const char *slash = strrchr(dir, '/');
    if (slash && slash != dir)
        s_addn(out, dir, (size_t)(slash - dir));
    else if (slash)
        s_add(out, "/");
    else {
        s_add(out, dir);
        s_add(out, "/..");
    }
}

/* Gives the pod's cgroup (parentfd, at pod in the hierarchy) the container's CPUs it lacks, when the pod's own
 * parent has them: an earlier hook narrowed the pod to the containers it had then (bound_pod), and this
 * container's devices are the kubelet's to hand out. allowed becomes the pod's CPUs; nothing changes if
 * anything is amiss (the caller then refuses the CPUs outside, as before). 0, or systemd's refusal
 * (systemd.h) on a v2 node whose pod slice it owns. */
static int widen_pod(int parentfd, const char *pod, int v2, const char *effective, const cpuset *cpus,
                     cpuset *allowed, cmk_error *err)
{
    cpuset above = {0}, own = {0};
    int up = openat(parentfd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (up < 0)
        return 0;
    int ok = !read_cpus_at(up, effective, &above) && cs_within(cpus, &above) &&
             !read_cpus_at(parentfd, "cpuset.cpus", &own);
    close(up);
    if (!ok)
        return 0;
    for (size_t i = 0; i < MASK_WORDS; i++)
        own.w[i] |= cpus->w[i];
    int status = v2 ? systemd_record(pod, &own, 0, err) : 0;
    if (!status && !try_write_cpus(parentfd, &own))
        *allowed = own;
    return status;
}

/* 1 if the cgroup directory name is the one a runtime gives the container id: <id>, cri-containerd-<id>.scope,
 * crio-<id>(.scope), docker-<id>.scope. */
static int names_container(const char *name, const char *id)
{
    static const char *const prefixes[] = {"", "cri-containerd-", "crio-", "docker-"};
    for (size_t p = 0; p < sizeof prefixes / sizeof *prefixes; p++) {
        size_t n = strlen(prefixes[p]);
        if (!strncmp(name, prefixes[p], n) && !strncmp(name + n, id, 64) &&
            (!name[n + 64] || !strcmp(name + n + 64, ".scope")))
            return 1;
    }
    return 0;
}

/* The pod's sandbox (pause) container, when no hook confined it: containerd builds its spec from its own
 * defaults, without the base spec's node-wide hook. It only sleeps, so it gets this container's CPUs (recorded
 * with systemd first on a v2 node whose sandbox scope it owns), and the pod can then be narrowed. A failure
 * leaves it as it was, and the pod unnarrowed. */
static void confine_sandbox(int child, const char *pod, const char *name, int v2, const cpuset *cpus)
{
    struct stat st;
    if (!fstatat(child, HOOK_CONFINED_CGROUP, &st, AT_SYMLINK_NOFOLLOW))
        return; /* a hook ran for it (CRI-O's hooks.d reaches sandboxes): already confined */
    str path = {0};
    cmk_error ignored = {0};
    s_add(&path, pod);
    s_add(&path, "/");
    s_add(&path, name);
    if (!(v2 && systemd_record(path.p, cpus, 0, &ignored)) && try_write_cpus(child, cpus)) {
        /* left as it was */
    }
    cmk_error_free(&ignored);
    free(path.p);
}

/* Narrows the pod's cgroup (parentfd, the container's parent) to the union of its children's CPUs. A
 * process that joins the container later (kubectl exec: runc and crun put it in the container's own cgroup,
 * not below it) sees that cgroup as its root when it makes a cgroup namespace, and the pod is its bound:
 * with every child confined (the sandbox by the node-wide hook, or here when the runtime names it), no
 * more than what the pod's containers were given. Since the kubelet frees devices only with the pod, the
 * union never holds CPUs another pod was given since. A child without CPUs of its own (v2: the pod's; v1:
 * not set up yet) leaves the pod as it is, and so does a pod without cpuset files; the caller never passes
 * the hierarchy's root. */
static int bound_pod(int parentfd, const char *pod, const char *pod_path, int v2, const char *effective,
                     const char *sandbox, const cpuset *cpus, cmk_error *err)
{
    cpuset own = {0}, children = {0};
    struct stat st;
    if (fstatat(parentfd, "cpuset.cpus", &st, AT_SYMLINK_NOFOLLOW))
        return 0; /* no cpuset files: the cpuset controller is not enabled for the pod */
    if (read_cpus_at(parentfd, "cpuset.cpus", &own) && read_cpus_at(parentfd, effective, &own))
        return 0; /* v2's empty cpuset.cpus: the pod has its parent's CPUs */
    int fd = openat(parentfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = fd < 0 ? NULL : fdopendir(fd);
    if (!dir) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    int seen = 0, whole = 1;
    for (struct dirent *d; whole && (d = readdir(dir));) {
        struct stat st;
        if (d->d_name[0] == '.' || fstatat(parentfd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISDIR(st.st_mode))
            continue;
        cpuset one = {0};
        int child = openat(parentfd, d->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (child >= 0 && sandbox && names_container(d->d_name, sandbox))
            confine_sandbox(child, pod_path, d->d_name, v2, cpus);
        whole = child >= 0 && !read_cpus_at(child, "cpuset.cpus", &one) && ++seen <= HOOK_MAX_POD_CHILDREN;
        if (child >= 0)
            close(child);
        for (size_t i = 0; i < MASK_WORDS; i++)
            children.w[i] |= one.w[i] & own.w[i];
    }
    closedir(dir);
    if (!whole || !seen)
        return 0;
    int status = v2 ? systemd_record(pod_path, &children, 0, err) : 0;
    if (status || !memcmp(&children, &own, sizeof own))
        return status; /* narrowed already: recorded all the same, for a pod an older hook narrowed unrecorded */
    str list = {0}, file = {0};
    s_ranges(&list, &children);
    s_add(&list, "\n");
    s_add(&file, pod);
    s_add(&file, "/cpuset.cpus");
    status = write_cgroup_file(parentfd, "cpuset.cpus", file.p, list.p,
                                   "cannot narrow the pod's cgroup to its containers' CPUs in ", HOOK_EXIT_CGROUP_WRITE, err);
    free(list.p);
    free(file.p);
    return status;
}

/* Moves every process of the container's cgroup (dirfd, already narrowed to cpus) into HOOK_CONFINED_CGROUP
 * below it. The container's own cgroup is then the bound of whatever its processes do to the cgroup they are
 * in: a root process that makes a cgroup namespace sees its cgroup as the root of the hierarchy it mounts
 * there, and may write that root's cpuset.cpus, but v1 refuses CPUs outside the parent's cpuset.cpus and v2
 * confines a child to its parent's effective CPUs (docs/design/hook.md, "The bound"). v1's new cpuset starts empty,
 * so it gets the container's memory nodes and the CPUs; v2's child has no cpuset files of its own (the
 * container's subtree_control enables nothing), and the container's cpuset governs it. */
static int confine_below(int dirfd, const struct cgroup *cg, const cpuset *cpus, cmk_error *err)
{
    str dir = {0}, file = {0}, text = {0};
    struct stat st;
    s_add(&dir, cg->dir.p);
    s_add(&dir, "/" HOOK_CONFINED_CGROUP);
    const char *what = "cannot create the cgroup that bounds the container's processes, ";
    if (mkdirat(dirfd, HOOK_CONFINED_CGROUP, 0755) && errno != EEXIST)
        return cgroup_error(HOOK_EXIT_CGROUP_WRITE, dir.p, what, errno, err);
    int leaf = openat(dirfd, HOOK_CONFINED_CGROUP, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (leaf < 0)
        return cgroup_error(HOOK_EXIT_CGROUP_WRITE, dir.p, what, errno == ELOOP ? E_SYMLINK : errno, err);
    int status = 0, e;
    if (!fstatat(leaf, "cpuset.cpus", &st, AT_SYMLINK_NOFOLLOW)) {
        s_add(&file, dir.p);
        s_add(&file, "/cpuset.cpus");
        if (!cg->v2 && (e = read_file_at(dirfd, "cpuset.mems", &text)))
            status = cgroup_error(HOOK_EXIT_CGROUP_WRITE, cg->dir.p, "cannot read the memory nodes of ", e, err);
        else if (!cg->v2)
            status = write_cgroup_file(leaf, "cpuset.mems", dir.p, text.p, "cannot give the memory nodes to ",
                                       HOOK_EXIT_CGROUP_WRITE, err);
        if (!status)
            status = write_cpus(leaf, file.p, cpus, err);
    }
    text.len = 0;
    if (!status && (e = read_file_at(dirfd, "cgroup.procs", &text)))
        status = cgroup_error(HOOK_EXIT_CGROUP_WRITE, cg->dir.p, "cannot list the processes of ", e, err);
    for (char *line = text.p; !status && line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        int fd = open_regular(leaf, "cgroup.procs", O_WRONLY);
        e = fd < 0 ? -fd : (write_all(fd, line, strlen(line)) && errno != ESRCH) ? errno : 0; /* ESRCH: it exited */
        if (fd >= 0 && close(fd) && !e)
            e = errno;
        if (e)
            status = cgroup_error(HOOK_EXIT_CGROUP_WRITE, dir.p, "cannot move the container's processes into ", e, err);
        line = nl ? nl + 1 : NULL;
    }
    close(leaf);
    return status;
}

int confine_cgroup(const struct cgroup *cg, long pid, const cpuset *cpus, const char *sandbox, cmk_error *err)
{
    str file = {0}, parent = {0}, text = {0};
    struct stat st;
    if (!strcmp(cg->path.p, "/") || !*cg->path.p) {
        s_addf(&err->msg, "process %ld is in the root cpuset cgroup: refusing to confine the whole host "
                     "(run the container in a cgroup of its own)", pid);
        return cmk_fail(err, HOOK_EXIT_NO_CGROUP);
    }
    /* Every file below is opened relative to this directory, never by a path a symlink could redirect. */
    int dirfd = open(cg->dir.p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0) {
        int e = errno;
        s_addf(&err->msg, "the cpuset cgroup of process %ld, ", pid);
        s_shown(&err->msg, cg->dir.p);
        if (e == ENOENT) {
            s_add(&err->msg, ", does not exist");
        } else {
            s_add(&err->msg, ", cannot be opened: ");
            s_errno(&err->msg, e == ELOOP ? E_SYMLINK : e);
        }
        return cmk_fail(err, HOOK_EXIT_NO_CGROUP);
    }
    s_add(&file, cg->dir.p);
    s_add(&file, "/cpuset.cpus");
    if (fstatat(dirfd, "cpuset.cpus", &st, AT_SYMLINK_NOFOLLOW) && errno == ENOENT) {
        s_add(&err->msg, "the cgroup ");
        s_shown(&err->msg, cg->dir.p);
        s_add(&err->msg, " has no cpuset.cpus: enable the cpuset controller in its parent's cgroup.subtree_control");
        return cmk_fail(err, HOOK_EXIT_NO_CGROUP);
    }
    str pod = {0};
    parent_path(cg->dir.p, &pod);
    const char *effective = cg->v2 ? "cpuset.cpus.effective" : "cpuset.effective_cpus";
    s_add(&parent, pod.p);
    s_add(&parent, "/");
    s_add(&parent, effective);
    cpuset allowed = {0}, outside = {0};
    int parentfd = openat(dirfd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int e = parentfd < 0 ? errno : read_file_at(parentfd, effective, &text);
    if (e)
        return cgroup_error(HOOK_EXIT_CGROUP_WRITE, parent.p, "cannot read the parent cgroup's CPUs from ", e, err);
    if (cpus_of_text(&text, &allowed)) {
        s_add(&err->msg, "cannot read the parent cgroup's CPUs from ");
        s_shown(&err->msg, parent.p);
        s_add(&err->msg, ": '");
        s_shown_n(&err->msg, text.p, text.len);
        s_add(&err->msg, "' is not a cpu list");
        return cmk_fail(err, HOOK_EXIT_CGROUP_WRITE);
    }
    str pod_path = {0};
    parent_path(cg->path.p, &pod_path);
    int status = cs_within(cpus, &allowed) ? 0 : widen_pod(parentfd, pod_path.p, cg->v2, effective, cpus, &allowed, err);
    if (status)
        return status;
    int count = 0;
    for (unsigned c = 0; c < MAX_CPUS; c++)
        if (cs_has(cpus, c) && !cs_has(&allowed, c)) {
            cs_add(&outside, c);
            count++;
        }
    if (count) {
        s_add(&err->msg, "the container's CPUs ");
        s_ranges(&err->msg, cpus);
        s_add(&err->msg, " are not within its parent cgroup's CPUs ");
        s_ranges(&err->msg, &allowed);
        s_add(&err->msg, count == 1 ? " (CPU " : " (CPUs ");
        s_ranges(&err->msg, &outside);
        s_add(&err->msg, " outside, from ");
        s_shown(&err->msg, parent.p);
        s_add(&err->msg, "): the pools' CPUs must stay within the pods' cgroup");
        return cmk_fail(err, HOOK_EXIT_OUTSIDE);
    }
    status = cg->v2 ? systemd_record(cg->path.p, cpus, 0, err) : 0;
    if (!status)
        status = write_cpus(dirfd, file.p, cpus, err);
    if (!status)
        status = confine_below(dirfd, cg, cpus, err);
    if (!status && strrchr(cg->path.p, '/') != cg->path.p) /* the parent is not the hierarchy's root */
        status = bound_pod(parentfd, pod.p, pod_path.p, cg->v2, effective, sandbox, cpus, err);
    close(parentfd);
    close(dirfd);
    return status;
}

