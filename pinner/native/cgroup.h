/* The container's cgroups for `cmk hook`: found from /proc/PID/cgroup and mountinfo, read and written only
 * through directory fds and open_regular, so no symlink a container planted redirects a write.
 */
#ifndef CMK_CGROUP_H
#define CMK_CGROUP_H

#include <stddef.h>

#include "cpulist.h"
#include "error.h"

struct cgroup {
    int v2;
    str path; /* inside the hierarchy, from /proc/PID/cgroup */
    str dir; /* the directory on disk */
};

/* "WHAT PATH: ERRNO" with status. */
int cgroup_error(int status, const char *path, const char *what, int e, cmk_error *err);
/* Finds the process's cgroup of controller ctl (cpuset, cpu): the v1 line naming ctl, else the v2 "0::" line. */
int find_cgroup(const char *proc_root, long pid, const char *ctl, struct cgroup *cg, cmk_error *err);
/* The mount point of the hierarchy holding cg (v1: the one of controller ctl), from mountinfo, joined with
 * cg's path into cg->dir. */
int find_mount(const char *proc_root, long pid, const char *ctl, struct cgroup *cg, cmk_error *err);
/* A container one of whose other cmk hook entries already ran is confined again from its own cgroup: cg
 * without a trailing HOOK_CONFINED_CGROUP. */
void container_cgroup(struct cgroup *cg);

/* The CPUs a cpuset file or the infra record holds (the kernel's form, no NUL inside); 0 or -1. */
int cpus_of_text(const str *text, cpuset *cpus);
/* The CPUs a cgroup file below dirfd holds; 0, or -1 when it is missing, unreadable, empty or no cpu list. */
int read_cpus_at(int dirfd, const char *name, cpuset *cpus);
/* Writes text to the cgroup file name below dirfd in one write(2); file is its path for messages. */
int write_cgroup_file(int dirfd, const char *name, const char *file, const char *text, const char *what,
                      int status, cmk_error *err);
/* Writes cpus to the cpuset.cpus below dirfd, or fails with HOOK_EXIT_CGROUP_WRITE. */
int write_cpus(int dirfd, const char *file, const cpuset *cpus, cmk_error *err);
/* Writes cpus to the cpuset.cpus below dirfd where a failure is no refusal: 0, or -1 with the cgroup as it was. */
int try_write_cpus(int dirfd, const cpuset *cpus);
/* Removes the CFS quota of the container's own cpu cgroup (cpuset_cg is its cpuset one). */
int remove_quota(const char *proc_root, long pid, const struct cgroup *cpuset_cg, cmk_error *err);

#endif
